package gateway.peers;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.payloadoffloading.S3BackedPayloadStore;
import software.amazon.payloadoffloading.S3Dao;

/**
 * Records whose value is the pointer AWS's payload offloading writes: {@link S3BackedPayloadStore}
 * (what the SQS and SNS extended clients use) uploads each text payload and returns the pointer
 * JSON, which becomes the record's value.
 */
public final class AwsPointerWriter {
    public static void main(String[] args) throws Exception {
        Spec spec = Spec.read(args);
        S3Client s3 = S3Client.builder()
                .endpointOverride(URI.create(spec.text("s3_endpoint")))
                .region(Region.US_EAST_1)
                .credentialsProvider(StaticCredentialsProvider.create(AwsBasicCredentials.create("testing", "testing")))
                .forcePathStyle(true)
                .build();
        S3BackedPayloadStore store = new S3BackedPayloadStore(new S3Dao(s3), spec.text("bucket"));
        try (KafkaProducer<byte[], byte[]> producer = spec.producer()) {
            for (JsonNode record : spec.root.get("records")) {
                String payload = new String(Spec.bytes(record, "value_b64"), StandardCharsets.UTF_8);
                String pointer = store.storeOriginalPayload(payload);
                Spec.send(producer, new ProducerRecord<>(spec.text("topic"), record.get("partition").asInt(),
                        Spec.bytes(record, "key_b64"), pointer.getBytes(StandardCharsets.UTF_8)));
            }
        }
        s3.close();
    }
}
