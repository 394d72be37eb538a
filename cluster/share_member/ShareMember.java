import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One member of a share group, driven line by line from Python (cluster/share.py): Kafka's own
 * KafkaShareConsumer, since no Python client the course serves has one. The first lines on stdin
 * are the client's properties (Java properties text) up to an empty line; then one command a
 * line, each answered with one line on stdout:
 *
 *   poll MS      -> {"topic":..,"partition":..,"offset":..,"key":b64|null,"value":b64|null,"delivery":n}
 *                   or {"none":true} when no record came within MS milliseconds
 *   accept | release | reject  -> acknowledges the record last handed out and commits it to the
 *                   brokers before answering {"acked":"accept"} (or {"error":..})
 *   close        -> leaves the group and exits
 *
 * One record is held at a time (share.acquire.mode=record_limit, max.poll.records=1): the
 * brokers lock only the record the member works on, and every other record stays available to
 * the other members. The client's own log goes to stderr, never into the answers.
 */
public final class ShareMember {
    private static String quoted(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    private static String b64(byte[] bytes) {
        return bytes == null ? "null" : quoted(Base64.getEncoder().encodeToString(bytes));
    }

    public static void main(String[] args) throws Exception {
        PrintStream answers = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(System.err); // a logger that writes to "stdout" writes to stderr
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder text = new StringBuilder();
        for (String line = in.readLine(); line != null && !line.isEmpty(); line = in.readLine()) {
            text.append(line).append('\n');
        }
        Properties props = new Properties();
        props.load(new StringReader(text.toString()));
        props.put("share.acknowledgement.mode", "explicit");
        props.put("share.acquire.mode", "record_limit");
        props.put("max.poll.records", "1");
        String topic = props.getProperty("course.topic");
        props.remove("course.topic");

        try (KafkaShareConsumer<byte[], byte[]> consumer =
                new KafkaShareConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topic));
            Iterator<ConsumerRecord<byte[], byte[]>> pending = null;
            ConsumerRecord<byte[], byte[]> held = null;
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                String[] words = line.trim().split(" ");
                try {
                    switch (words[0]) {
                        case "poll": {
                            if (held != null) {
                                answers.println("{\"error\":\"acknowledge the record you hold before asking for another\"}");
                                break;
                            }
                            if (pending == null || !pending.hasNext()) {
                                ConsumerRecords<byte[], byte[]> got = consumer.poll(Duration.ofMillis(Long.parseLong(words[1])));
                                pending = got.iterator();
                            }
                            if (!pending.hasNext()) {
                                answers.println("{\"none\":true}");
                                break;
                            }
                            held = pending.next();
                            answers.println("{\"topic\":" + quoted(held.topic()) + ",\"partition\":" + held.partition()
                                    + ",\"offset\":" + held.offset() + ",\"key\":" + b64(held.key())
                                    + ",\"value\":" + b64(held.value())
                                    + ",\"delivery\":" + held.deliveryCount().map(String::valueOf).orElse("null") + "}");
                            break;
                        }
                        case "accept":
                        case "release":
                        case "reject": {
                            if (held == null) {
                                answers.println("{\"error\":\"no record to acknowledge: poll first\"}");
                                break;
                            }
                            consumer.acknowledge(held, AcknowledgeType.valueOf(words[0].toUpperCase()));
                            held = null;
                            String failed = consumer.commitSync(Duration.ofSeconds(30)).values().stream()
                                    .filter(Optional::isPresent).map(e -> e.get().toString()).findFirst().orElse(null);
                            answers.println(failed == null ? "{\"acked\":" + quoted(words[0]) + "}"
                                    : "{\"error\":" + quoted("the brokers refused the acknowledgement: " + failed) + "}");
                            break;
                        }
                        case "close":
                            return;
                        default:
                            answers.println("{\"error\":" + quoted("unknown command " + words[0]) + "}");
                    }
                } catch (RuntimeException e) {
                    answers.println("{\"error\":" + quoted(e.getClass().getSimpleName() + ": " + e.getMessage()) + "}");
                }
            }
        }
    }
}
