package config

// IngressTopic is where producers write: ingress.topic, else the first
// of kafka.topics.
func (c Config) IngressTopic() string {
	if c.Ingress.Topic != "" {
		return c.Ingress.Topic
	}
	return c.Kafka.Topics[0]
}

// IngressMaxBody is ingress.max_body_bytes with its default filled.
func (c Config) IngressMaxBody() int {
	if c.Ingress.MaxBodyBytes > 0 {
		return c.Ingress.MaxBodyBytes
	}
	return c.Kafka.MaxValueBytes
}
