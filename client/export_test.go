package client

import "time"

// SetRand replaces the jitter source of c (tests only): rnd(n) in [0, n).
func SetRand(c *Client, rnd func(n int64) int64) { c.rnd = rnd }

// UseNetRead makes c read through its net.Conn instead of the raw socket
// (as a TLS connection does).
func UseNetRead(c *Conn) { c.rc = nil }

// HoldsReadBuffer reports whether c holds a read buffer.
func HoldsReadBuffer(c *Conn) bool { return c.rb != nil }

// ExpireReadDeadline sets c's read deadline in the past, as if its idle
// deadline had fired while nobody was reading.
func ExpireReadDeadline(c *Conn) { c.nc.SetReadDeadline(time.Unix(1, 0)) }
