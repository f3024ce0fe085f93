"""What confluent-kafka does not expose of librdkafka: its C API through ctypes, and exact group offsets."""
