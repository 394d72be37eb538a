package course.policy;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.server.policy.CreateTopicPolicy;

/**
 * A partition budget per namespace: the topics whose names start with "<namespace>." may hold
 * at most course.partition.budget partitions together. The brokers call validate() before
 * they create a topic (create.topic.policy.class.name); the count comes from the cluster's
 * own metadata, asked through the broker's INTERNAL listener as the brokers' user.
 *
 * Its settings are held to the course's bounds too (TopicLimits; TopicSettingsPolicy does the
 * same for changes).
 *
 * Adding partitions to an existing topic has no such hook in Kafka, which is why namespace
 * users are not given ALTER on topics (cluster/accounts.py). Topics without a dot (the
 * course's own, Kafka's internal ones) are not counted.
 */
public class NamespaceBudgetPolicy implements CreateTopicPolicy {
    public static final String BUDGET = "course.partition.budget";
    public static final String BOOTSTRAP = "course.policy.bootstrap.servers";
    public static final String JAAS = "course.policy.sasl.jaas.config";

    // The metadata a broker answers with lags the controller by a moment, so a topic approved
    // a second ago may not be listed yet: approvals are remembered for a few seconds and
    // counted unless the metadata has the topic (then its listed size counts). A topic
    // deleted within those seconds still counts until they pass.
    private static final long REMEMBER_MS = 3_000;

    private int budget;
    private TopicLimits limits;
    private final Map<String, Object> adminConfig = new HashMap<>();
    private final Map<String, long[]> approved = new HashMap<>(); // topic -> {partitions, when}
    private Admin admin;

    @Override
    public void configure(Map<String, ?> configs) {
        budget = Integer.parseInt(String.valueOf(configs.get(BUDGET)));
        limits = new TopicLimits(configs.get(TopicLimits.CONFIG));
        adminConfig.put("bootstrap.servers", String.valueOf(configs.get(BOOTSTRAP)));
        adminConfig.put("security.protocol", "SASL_PLAINTEXT");
        adminConfig.put("sasl.mechanism", "PLAIN");
        adminConfig.put("sasl.jaas.config", String.valueOf(configs.get(JAAS)));
        adminConfig.put("client.id", "course-partition-budget");
        adminConfig.put("request.timeout.ms", 5000);
        adminConfig.put("default.api.timeout.ms", 8000);
    }

    @Override
    public void validate(RequestMetadata request) throws PolicyViolationException {
        String topic = request.topic();
        int dot = topic.indexOf('.');
        if (dot <= 0 || topic.startsWith("__")) {
            return;
        }
        limits.check(topic, request.configs());
        String prefix = topic.substring(0, dot + 1);
        int wanted = request.numPartitions() != null ? request.numPartitions()
                : request.replicasAssignments() != null ? request.replicasAssignments().size() : 1;
        if (wanted > budget) {
            throw new PolicyViolationException(String.format(
                "%s would have %d partitions; a namespace may hold %d in all. Use fewer partitions.",
                topic, wanted, budget));
        }
        synchronized (this) {
            int held = partitionsHeld(prefix, topic);
            if (held + wanted > budget) {
                throw new PolicyViolationException(String.format(
                    "Namespace %s already holds %d partitions and %s would add %d; a namespace may hold %d "
                        + "in all. Delete topics you no longer need (lab.delete_my_topics()) and try again.",
                    prefix.substring(0, prefix.length() - 1), held, topic, wanted, budget));
            }
            approved.put(topic, new long[] {wanted, System.currentTimeMillis()});
        }
    }

    private int partitionsHeld(String prefix, String creating) {
        try {
            if (admin == null) {
                admin = Admin.create(adminConfig);
            }
            Set<String> names = admin.listTopics().names().get(8, TimeUnit.SECONDS);
            names.removeIf(name -> !name.startsWith(prefix));
            int held = 0;
            if (!names.isEmpty()) {
                for (KafkaFuture<TopicDescription> d : admin.describeTopics(names).topicNameValues().values()) {
                    try {
                        held += d.get(8, TimeUnit.SECONDS).partitions().size();
                    } catch (ExecutionException e) {
                        // Deleted since it was listed (a cell that makes its topic afresh): it holds nothing.
                        if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                            throw e;
                        }
                    }
                }
            }
            long now = System.currentTimeMillis();
            approved.values().removeIf(a -> now - a[1] > REMEMBER_MS);
            for (Map.Entry<String, long[]> a : approved.entrySet()) {
                if (a.getKey().startsWith(prefix) && !names.contains(a.getKey()) && !a.getKey().equals(creating)) {
                    held += (int) a.getValue()[0];
                }
            }
            return held;
        } catch (Exception e) {
            // A broker that does not answer: refuse
            // rather than create past the budget; the client may simply try again.
            throw new PolicyViolationException("Could not count the partitions of namespace "
                + prefix + " (" + e + "); try again in a moment.");
        }
    }

    @Override
    public synchronized void close() {
        if (admin != null) {
            admin.close();
        }
    }
}
