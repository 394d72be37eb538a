package course.policy;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.kafka.common.errors.PolicyViolationException;

/**
 * What the topics of a namespace ("<namespace>.<name>") may set, for the settings that cost the
 * brokers resources whatever the client: open files (segment.ms, segment.bytes, the index
 * sizes), memory (max.message.bytes), disk writes (flush.*, preallocate), cleaner time. The
 * table comes from the brokers' settings, course.topic.limits (cluster/settings.py
 * TOPIC_LIMITS), as "name=min..max" (either end may be empty: no bound) or "name=a|b" (the
 * values allowed), separated by ";". A setting the table does not name is not limited; a
 * setting given no value (back to the broker's default) always is allowed. Topics of the
 * course's own (no dot) and Kafka's internal ones ("__") are not limited.
 */
final class TopicLimits {
    static final String CONFIG = "course.topic.limits";

    private final Map<String, String[]> rules = new LinkedHashMap<>();

    TopicLimits(Object table) {
        if (table == null) {
            return;
        }
        for (String rule : String.valueOf(table).split(";")) {
            int eq = rule.indexOf('=');
            if (eq > 0) {
                String allowed = rule.substring(eq + 1).trim();
                rules.put(rule.substring(0, eq).trim(), allowed.contains("..")
                    ? allowed.split("\\.\\.", -1) : new String[] {allowed});
            }
        }
    }

    static boolean inNamespace(String topic) {
        int dot = topic.indexOf('.');
        return dot > 0 && !topic.startsWith("__");
    }

    /** Throws, naming the setting, its value and what is allowed, if a setting is out of bounds. */
    void check(String topic, Map<String, String> configs) {
        if (configs == null || !inNamespace(topic)) {
            return;
        }
        for (Map.Entry<String, String> c : configs.entrySet()) {
            if (c.getKey().startsWith("internal.")) {
                // Kafka's own test hooks (internal.segment.bytes overrides segment.bytes, unchecked)
                throw new PolicyViolationException(String.format(
                    "%s is not allowed on topic %s: internal settings are the course's cluster's alone.",
                    c.getKey(), topic));
            }
            String[] rule = rules.get(c.getKey());
            String value = c.getValue();
            if (rule == null || value == null) {
                continue;
            }
            if (!allowed(rule, value.trim())) {
                throw new PolicyViolationException(String.format(
                    "%s=%s is not allowed on topic %s: the course's cluster allows %s on a student's topics "
                        + "(a shared cluster bounds what each namespace can cost its brokers). Use a value in "
                        + "that range, or leave the setting out.",
                    c.getKey(), value, topic, describe(rule)));
            }
        }
    }

    private static boolean allowed(String[] rule, String value) {
        if (rule.length == 1) {
            for (String v : rule[0].split("\\|")) {
                if (v.equalsIgnoreCase(value)) {
                    return true;
                }
            }
            return false;
        }
        try {
            double v = Double.parseDouble(value);
            return (rule[0].isEmpty() || v >= Double.parseDouble(rule[0]))
                && (rule[1].isEmpty() || v <= Double.parseDouble(rule[1]));
        } catch (NumberFormatException e) {
            return false;
        }
    }

    private static String describe(String[] rule) {
        if (rule.length == 1) {
            return "only " + rule[0].replace("|", " or ");
        }
        if (rule[0].isEmpty()) {
            return "at most " + rule[1];
        }
        return rule[1].isEmpty() ? "at least " + rule[0] : "from " + rule[0] + " to " + rule[1];
    }
}
