package gateway.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Commits offsets with exact metadata for a group, and reads committed metadata back, the way every
 * Java client does: Apache {@code kafka-clients}' own {@code commitSync} and {@code committed}, so
 * the bytes on the wire are {@code String.getBytes(UTF_8)}, with no terminator.
 *
 * <p>Usage: {@code GroupCommitter <bootstrap>}. One JSON command per stdin line, one JSON answer
 * per stdout line, so that a test drives one JVM through all its steps:
 * <pre>
 * {"group": "g", "commit": [{"topic": "t", "partition": 0, "offset": 3, "metadata": "4,"}]}
 * {"group": "g", "read": [{"topic": "t", "partition": 0}]}
 * </pre>
 * The answer lists each partition with {@code offset} and {@code metadata_hex}, the UTF-8 bytes of
 * the metadata string that was sent or came back ({@code null} when nothing is committed). The
 * consumers never subscribe: they commit from outside the group's membership (generation -1), as
 * Kafka's admin tools do, which the broker accepts while the group has no members.
 */
public final class GroupCommitter {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            throw new IllegalArgumentException("usage: GroupCommitter <bootstrap>");
        }
        Map<String, KafkaConsumer<byte[], byte[]>> consumers = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode command = JSON.readTree(line);
                KafkaConsumer<byte[], byte[]> consumer = consumers.computeIfAbsent(
                        command.get("group").asText(), group -> open(args[0], group));
                ArrayNode answer = command.has("commit")
                        ? commit(consumer, command.get("commit"))
                        : read(consumer, command.get("read"));
                System.out.println(JSON.writeValueAsString(JSON.createObjectNode().set("partitions", answer)));
                System.out.flush();
            }
        } finally {
            for (KafkaConsumer<byte[], byte[]> consumer : consumers.values()) {
                consumer.close(Duration.ofSeconds(5));
            }
        }
    }

    private static KafkaConsumer<byte[], byte[]> open(String bootstrap, String group) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    private static ArrayNode commit(KafkaConsumer<byte[], byte[]> consumer, JsonNode entries) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
        for (JsonNode entry : entries) {
            offsets.put(partition(entry), new OffsetAndMetadata(entry.get("offset").asLong(), entry.get("metadata").asText()));
        }
        consumer.commitSync(offsets, Duration.ofSeconds(60));
        ArrayNode out = JSON.createArrayNode();
        offsets.forEach((tp, om) -> out.add(describe(tp, om)));
        return out;
    }

    private static ArrayNode read(KafkaConsumer<byte[], byte[]> consumer, JsonNode entries) {
        Set<TopicPartition> wanted = new HashSet<>();
        for (JsonNode entry : entries) {
            wanted.add(partition(entry));
        }
        Map<TopicPartition, OffsetAndMetadata> got = consumer.committed(wanted, Duration.ofSeconds(60));
        ArrayNode out = JSON.createArrayNode();
        for (JsonNode entry : entries) {
            TopicPartition tp = partition(entry);
            out.add(describe(tp, got.get(tp)));
        }
        return out;
    }

    private static TopicPartition partition(JsonNode entry) {
        return new TopicPartition(entry.get("topic").asText(), entry.get("partition").asInt());
    }

    private static ObjectNode describe(TopicPartition tp, OffsetAndMetadata om) {
        ObjectNode node = JSON.createObjectNode().put("topic", tp.topic()).put("partition", tp.partition());
        if (om == null) {
            return node.putNull("offset").putNull("metadata_hex");
        }
        byte[] metadata = om.metadata().getBytes(StandardCharsets.UTF_8);
        return node.put("offset", om.offset()).put("metadata_hex", HexFormat.of().formatHex(metadata));
    }
}
