package gateway.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.util.Base64;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** What the Python test asks a writer to do, read from the JSON file named on the command line. */
final class Spec {
    final JsonNode root;

    private Spec(JsonNode root) {
        this.root = root;
    }

    static Spec read(String[] args) throws IOException {
        if (args.length != 1) {
            throw new IllegalArgumentException("usage: <writer> <spec.json>");
        }
        return new Spec(new ObjectMapper().readTree(new File(args[0])));
    }

    String text(String field) {
        return root.get(field).asText();
    }

    static byte[] bytes(JsonNode record, String field) {
        JsonNode node = record.get(field);
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    /** A plain producer: the peer's code has already turned key and value into the bytes to send. */
    KafkaProducer<byte[], byte[]> producer() {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, text("bootstrap"));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, "2000000");
        return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    }

    /** Send and wait, so records land in the order the test listed them; one JSON line per record. */
    static void send(KafkaProducer<byte[], byte[]> producer, ProducerRecord<byte[], byte[]> record) throws Exception {
        RecordMetadata meta = producer.send(record).get();
        System.out.println("{\"partition\": " + meta.partition() + ", \"offset\": " + meta.offset() + "}");
    }
}
