package mqttconn

import (
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// OwnCopies makes opts's store (a memory store if none is set) keep its own copy of each
// outbound PUBLISH. paho puts a publish into its store and hands the same packet to the
// connection's writer; when a connection comes back, it takes the stored packets and sets
// their DUP flag while the new connection's writer may be writing that very packet (a data
// race in paho 1.5.1, seen by the race detector in a broker-restart test). With a copy in
// the store, the flag is set on the copy, which is then sent as the resend it is.
func OwnCopies(opts *mqtt.ClientOptions) {
	s := opts.Store
	if s == nil {
		s = mqtt.NewMemoryStore()
	}
	if _, done := s.(copyingStore); !done {
		opts.SetStore(copyingStore{s})
	}
}

type copyingStore struct{ mqtt.Store }

// Put stores a copy of a PUBLISH (made before paho hands the packet to its writer: Publish
// persists first); its payload is shared, and no one writes to it.
func (s copyingStore) Put(key string, m packets.ControlPacket) {
	if p, ok := m.(*packets.PublishPacket); ok {
		cp := *p
		m = &cp
	}
	s.Store.Put(key, m)
}
