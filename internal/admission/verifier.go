package admission

import (
	"fmt"
	"os"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/config"
)

// VerifierConfig returns the token checks of cfg as a node applies them:
// the HS256 secrets, the public key file's content, issuer, audience,
// leeway and maximum lifetime. The key set of WSGATE_JWKS_URL is the
// caller's to build and run (auth.NewKeySet), as it fetches over the
// network. The error names the setting at fault.
func VerifierConfig(cfg *config.Gateway) (auth.VerifierConfig, error) {
	vc := auth.VerifierConfig{
		HMACSecrets: cfg.JWTSecrets(),
		Issuer:      cfg.JWTIssuer, Audience: cfg.JWTAudience,
		Leeway: cfg.JWTLeeway, MaxLifetime: cfg.JWTMaxLifetime,
	}
	if cfg.JWTPublicKeyFile != "" {
		b, err := os.ReadFile(cfg.JWTPublicKeyFile)
		if err != nil {
			return vc, fmt.Errorf("WSGATE_JWT_PUBLIC_KEY_FILE: %w", err)
		}
		vc.PublicKeyPEM = b
	}
	return vc, nil
}
