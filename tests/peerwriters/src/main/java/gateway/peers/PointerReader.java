package gateway.peers;

import com.bakdata.kafka.LargeMessageDeserializer;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serdes;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.payloadoffloading.S3BackedPayloadStore;
import software.amazon.payloadoffloading.S3Dao;

/**
 * Reads a topic the way a Java service beside ours would, with the peer library's own reader, and
 * prints one JSON line per record: partition, offset, key (base64), and the value's size and SHA-256.
 *
 * <p>{@code format} "bakdata": the consumer's value deserializer is bakdata's
 * {@link LargeMessageDeserializer} (byte-array serde inside), configured only with the store's
 * endpoint or credentials and {@code large.message.accept.no.headers}, which makes a record without
 * bakdata's flag header an inline value (what our plain records are). {@code format} "aws": AWS's
 * {@link S3BackedPayloadStore#getOriginalPayload} resolves each value that is its pointer JSON (the
 * library has no Kafka deserializer; the SQS and SNS clients tell a pointer by a message attribute,
 * a Kafka reader by the pointer itself), and the text it returns is digested as UTF-8.
 */
public final class PointerReader {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String AWS_POINTER = "[\"software.amazon.payloadoffloading.PayloadS3Pointer\"";

    public static void main(String[] args) throws Exception {
        Spec spec = Spec.read(args);
        String topic = spec.text("topic");
        int count = spec.root.get("count").asInt();
        boolean bakdata = "bakdata".equals(spec.text("format"));
        S3BackedPayloadStore aws = bakdata ? null : awsStore(spec);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(
                consumerProps(spec), new ByteArrayDeserializer(), bakdata ? bakdataValues(spec) : new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(60))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            int seen = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(spec.root.path("timeout_s").asInt(120)).toNanos();
            while (seen < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    byte[] value = record.value();
                    if (aws != null && value != null && startsWith(value, AWS_POINTER)) {
                        String pointer = new String(value, StandardCharsets.UTF_8);
                        value = aws.getOriginalPayload(pointer).getBytes(StandardCharsets.UTF_8);
                    }
                    print(record, value);
                    seen++;
                }
            }
        }
    }

    private static Properties consumerProps(Spec spec) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.text("bootstrap"));
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        return props;
    }

    /** bakdata's deserializer as its users configure it: the store's access, nothing about our records. */
    private static Deserializer<byte[]> bakdataValues(Spec spec) {
        Map<String, Object> config = new HashMap<>();
        config.put("large.message.value.serde", Serdes.ByteArraySerde.class);
        config.put("large.message.accept.no.headers", true);
        if (spec.root.hasNonNull("s3_endpoint")) {
            config.put("large.message.s3.endpoint", spec.text("s3_endpoint"));
            config.put("large.message.s3.region", "us-east-1");
            config.put("large.message.s3.access.key", "testing");
            config.put("large.message.s3.secret.key", "testing");
            config.put("large.message.s3.path.style.access", true);
        }
        if (spec.root.hasNonNull("abs_connection_string")) {
            config.put("large.message.abs.connection.string", spec.text("abs_connection_string"));
        }
        if (spec.root.hasNonNull("gs_key_path")) {
            config.put("large.message.gs.key.path", spec.text("gs_key_path"));
        }
        LargeMessageDeserializer<byte[]> values = new LargeMessageDeserializer<>();
        values.configure(config, false);
        return values;
    }

    private static S3BackedPayloadStore awsStore(Spec spec) {
        S3Client s3 = S3Client.builder()
                .endpointOverride(URI.create(spec.text("s3_endpoint")))
                .region(Region.US_EAST_1)
                .credentialsProvider(StaticCredentialsProvider.create(AwsBasicCredentials.create("testing", "testing")))
                .forcePathStyle(true)
                .build();
        // the bucket given here is where the store would write; reads go where each pointer says
        return new S3BackedPayloadStore(new S3Dao(s3), spec.root.path("bucket").asText("unused"));
    }

    private static boolean startsWith(byte[] value, String prefix) {
        byte[] head = prefix.getBytes(StandardCharsets.UTF_8);
        if (value.length < head.length) {
            return false;
        }
        for (int i = 0; i < head.length; i++) {
            if (value[i] != head[i]) {
                return false;
            }
        }
        return true;
    }

    private static void print(ConsumerRecord<byte[], byte[]> record, byte[] value) throws Exception {
        ObjectNode line = JSON.createObjectNode().put("partition", record.partition()).put("offset", record.offset());
        line.put("key_b64", record.key() == null ? null : Base64.getEncoder().encodeToString(record.key()));
        if (value == null) {
            line.putNull("size").putNull("sha256");
        } else {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(value);
            line.put("size", value.length).put("sha256", HexFormat.of().formatHex(digest));
        }
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
    }
}
