//go:build unix

package stack

// linkPort is the port the other nodes and the sentinels reach node on: its TLS port when
// the stack runs replication and sentinels over TLS (Options.SentinelTLS).
func (s *Stack) linkPort(node *Proc) int {
	if s.tlsAll {
		return node.TLSPort
	}
	return node.Port
}

// sentinelTLS is the lines of a sentinel's config for Options.SentinelTLS: a TLS port
// beside the plain one (the launcher's probes use the plain one), the stack's certificate,
// and TLS to the nodes and to the other sentinels (tls-replication; a sentinel then
// announces its TLS port to the others). It sets p.TLSPort.
func (s *Stack) sentinelTLS(p *Proc) string {
	if !s.tlsAll {
		return ""
	}
	conf := s.tlsConf(p)
	if conf == "" {
		return "" // no port: the sentinel then serves no TLS, and the test that wants it fails
	}
	return conf + "tls-replication yes\n"
}

// SentinelTLSAddrs returns the sentinels' TLS addresses (Options.SentinelTLS), for a client
// that finds the master through them over TLS.
func (s *Stack) SentinelTLSAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, p := range s.Sentinels {
		addrs[i] = p.TLSAddr()
	}
	return addrs
}

// plainAddr is the plain address of the node whose TLS address is addr (a master the
// sentinels report under Options.SentinelTLS), for the launcher's probes; any other
// address is returned as it is.
func (s *Stack) plainAddr(addr string) string {
	for _, p := range s.Redis {
		if p.TLSPort != 0 && p.TLSAddr() == addr {
			return p.Addr()
		}
	}
	return addr
}
