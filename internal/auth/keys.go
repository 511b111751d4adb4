package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// minRSABits is the smallest RSA modulus accepted for RS256 (NIST SP 800-131A).
const minRSABits = 2048

// parsePublicKey reads the first public key of a PEM file: a PKIX
// "PUBLIC KEY", a PKCS#1 "RSA PUBLIC KEY" or the key of a "CERTIFICATE".
// Blocks of other types before it are skipped; a private key is refused so
// an operator who points the setting at the wrong file is told so.
// It returns an *rsa.PublicKey (at least 2048 bits) or an *ecdsa.PublicKey on
// P-256; anything else is an error naming the problem.
func parsePublicKey(data []byte) (any, error) {
	rest := data
	sawBlock := false
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		sawBlock = true
		var (
			key any
			err error
		)
		switch block.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				key = cert.PublicKey
			}
		default:
			if strings.Contains(block.Type, "PRIVATE KEY") {
				return nil, errors.New("jwt public key: the PEM holds a private key; give the public key")
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jwt public key: cannot parse %s block: %w", block.Type, err)
		}
		return checkPublicKey(key)
	}
	if !sawBlock {
		return nil, errors.New("jwt public key: no PEM block")
	}
	return nil, errors.New("jwt public key: no PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE block")
}

// checkPublicKey accepts the key types that have an algorithm here.
func checkPublicKey(key any) (any, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < minRSABits {
			return nil, fmt.Errorf("jwt public key: RSA key of %d bits is too small (need at least %d)", bits, minRSABits)
		}
		return k, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("jwt public key: ECDSA curve %s not supported (ES256 needs P-256)", k.Curve.Params().Name)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("jwt public key: unsupported key type %T (need RSA or ECDSA P-256)", key)
	}
}
