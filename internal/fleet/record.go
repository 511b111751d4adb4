package fleet

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// APIURL derives a node's HTTP base URL from its WebSocket URL.
func APIURL(wsURL, adminListen string) string {
	u, err := url.Parse(wsURL)
	if err != nil {
		return ""
	}
	if adminListen != "" {
		// The API is on the admin listener: its port, on its host when
		// that is a specific address, else on the advertised host.
		host, port, err := net.SplitHostPort(adminListen)
		if err != nil {
			return ""
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = u.Hostname()
		}
		u.Host = net.JoinHostPort(host, port)
	}
	switch u.Scheme {
	case "wss":
		u.Scheme = "https"
	default:
		u.Scheme = "http"
	}
	u.Path = strings.TrimSuffix(u.Path, "/ws")
	u.RawQuery = ""
	return u.String()
}

var cpuMu sync.Mutex

var cpuLast struct {
	at  time.Time
	cpu time.Duration
	val float64
}

// CPULoad is the process's CPU use since the previous call, in cores.
func CPULoad() float64 {
	cpuMu.Lock()
	defer cpuMu.Unlock()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	now := time.Now()
	if !cpuLast.at.IsZero() {
		if dt := now.Sub(cpuLast.at); dt > 100*time.Millisecond {
			cpuLast.val = float64(cpu-cpuLast.cpu) / float64(dt)
			cpuLast.at, cpuLast.cpu = now, cpu
		}
		return cpuLast.val
	}
	cpuLast.at, cpuLast.cpu = now, cpu
	return 0
}
