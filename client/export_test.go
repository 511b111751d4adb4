package client

// SetRand replaces the jitter source of c (tests only): rnd(n) in [0, n).
func SetRand(c *Client, rnd func(n int64) int64) { c.rnd = rnd }
