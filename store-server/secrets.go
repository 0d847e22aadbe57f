package main

import "github.com/posgate/posgate/internal/cli"

// MinTokenBytes is the shortest manager or metrics token the store-server takes.
const MinTokenBytes = 16

// defineSecrets defines the store-server's secrets: each from its file (--X-file) or its
// environment variable, never an argument (cli.Flags.Secret).
func (m *Main) defineSecrets(fs *cli.Flags) {
	fs.Secret(&m.APIToken, "api-token", "POSGATE_API_TOKEN", MinTokenBytes, "the manager API's bearer token (required)")
	fs.Secret(&m.MetricsToken, "metrics-token", "POSGATE_METRICS_TOKEN", MinTokenBytes,
		"a bearer token for GET /metrics only (for Prometheus), besides the manager token")
	fs.Secret(&m.RedisPassword, "redis-password", "POSGATE_REDIS_PASSWORD", 1,
		"the password of Redis (its requirepass) and of the Sentinels (their requirepass)")
	fs.Secret(&m.MQTTPassword, "mqtt-password", "POSGATE_MQTT_PASSWORD", 1,
		"the password of --mqtt-username on the external broker")
}
