package gateway.peers;

import com.bakdata.kafka.LargeMessageSerializer;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * Records as bakdata's large-message serde writes them: each record's key and value go through
 * {@link LargeMessageSerializer} (wrapping the byte-array serde) configured as the record asks,
 * byte-flag or headers protocol, with the blob compression it names, into S3, GCS or Azure Blob
 * Storage as the base path's scheme says.
 */
public final class BakdataWriter {
    public static void main(String[] args) throws Exception {
        Spec spec = Spec.read(args);
        String topic = spec.text("topic");
        try (KafkaProducer<byte[], byte[]> producer = spec.producer()) {
            for (JsonNode record : spec.root.get("records")) {
                Map<String, Object> config = new HashMap<>();
                config.put("large.message.base.path", spec.text("base_path"));
                config.put("large.message.max.byte.size", record.get("max_byte_size").asInt());
                config.put("large.message.use.headers", record.get("use_headers").asBoolean());
                config.put("large.message.compression.type", record.get("compression").asText());
                if (spec.root.hasNonNull("s3_endpoint")) {
                    config.put("large.message.s3.endpoint", spec.text("s3_endpoint"));
                    config.put("large.message.s3.region", "us-east-1");
                    config.put("large.message.s3.access.key", "testing");
                    config.put("large.message.s3.secret.key", "testing");
                    config.put("large.message.s3.path.style.access", true);
                }
                if (spec.root.hasNonNull("abs_connection_string")) { // abs:// base paths: Azurite
                    config.put("large.message.abs.connection.string", spec.text("abs_connection_string"));
                }
                if (spec.root.hasNonNull("gs_key_path")) { // gs:// base paths: a service-account key file
                    config.put("large.message.gs.key.path", spec.text("gs_key_path"));
                }
                RecordHeaders headers = new RecordHeaders();
                byte[] key = Spec.bytes(record, "key_b64");
                byte[] value = Spec.bytes(record, "value_b64");
                try (LargeMessageSerializer<byte[]> keys = new LargeMessageSerializer<>();
                        LargeMessageSerializer<byte[]> values = new LargeMessageSerializer<>()) {
                    keys.configure(config, true);
                    values.configure(config, false);
                    byte[] keyBytes = key == null ? null : keys.serialize(topic, headers, key);
                    byte[] valueBytes = values.serialize(topic, headers, value);
                    Spec.send(producer, new ProducerRecord<>(
                            topic, record.get("partition").asInt(), keyBytes, valueBytes, headers));
                }
            }
        }
    }
}
