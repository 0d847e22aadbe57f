package mqttconn

import (
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// TestOwnCopies: the store keeps a copy of a PUBLISH, so that paho's resume setting DUP on
// what it takes from the store does not touch the packet its writer may be sending; other
// packets are kept as they are; a store the options set is wrapped, not replaced.
func TestOwnCopies(t *testing.T) {
	for _, set := range []mqtt.Store{nil, mqtt.NewOrderedMemoryStore()} {
		opts := mqtt.NewClientOptions()
		if set != nil {
			opts.SetStore(set)
		}
		OwnCopies(opts)
		OwnCopies(opts) // once is enough
		cs, ok := opts.Store.(copyingStore)
		if !ok {
			t.Fatalf("store %T, want the copying store", opts.Store)
		}
		if _, twice := cs.Store.(copyingStore); twice || set != nil && cs.Store != set {
			t.Fatalf("wrapped %T, want %T once", cs.Store, set)
		}
		s := opts.Store
		s.Open()
		pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		pub.Qos, pub.MessageID, pub.TopicName, pub.Payload = 1, 7, "pos/S1/T1/down", []byte("acks")
		s.Put("o.7", pub)
		stored := s.Get("o.7").(*packets.PublishPacket)
		if stored == pub || stored.MessageID != 7 || stored.TopicName != pub.TopicName || string(stored.Payload) != "acks" {
			t.Fatalf("stored %+v (same packet: %v)", stored, stored == pub)
		}
		stored.Dup = true // what paho's resume does
		if pub.Dup {
			t.Fatal("setting DUP on the stored packet changed the one handed to the writer")
		}
		sub := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
		sub.MessageID = 8
		s.Put("o.8", sub)
		if got := s.Get("o.8"); got != sub {
			t.Fatalf("a SUBSCRIBE was copied: %v", got)
		}
		s.Close()
	}
}
