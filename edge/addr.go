package edge

import (
	"net"
	"net/netip"
)

// AddrKey is the key of a client address for the per-address limits: an
// IPv4 address itself, an IPv6 address its /64 — the least a subscriber
// is given, so one of them holds a whole /64 and could otherwise take a
// fresh address for every connection — and an IPv4-mapped IPv6 address
// its IPv4 one. The zone is dropped. What does not parse as an address is
// its own key. It is the one rule for grouping addresses: the
// orchestrator's session and connection caps use it too.
func AddrKey(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64) // never fails for IPv6
	return p.String()
}

// addrKeyOf is AddrKey of a connection's remote address.
func addrKeyOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return AddrKey(tcp.IP.String())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	return AddrKey(host)
}
