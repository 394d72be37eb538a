package course.policy;

import java.util.Map;

import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.server.policy.AlterConfigPolicy;

/**
 * The same bounds on a namespace's topic settings as at creation (TopicLimits), on every change
 * of them (alter.config.policy.class.name): a topic created within bounds cannot be changed out
 * of them afterwards, with any client.
 */
public class TopicSettingsPolicy implements AlterConfigPolicy {
    private TopicLimits limits;

    @Override
    public void configure(Map<String, ?> configs) {
        limits = new TopicLimits(configs.get(TopicLimits.CONFIG));
    }

    @Override
    public void validate(RequestMetadata request) throws PolicyViolationException {
        if (request.resource().type() == ConfigResource.Type.TOPIC) {
            limits.check(request.resource().name(), request.configs());
        }
    }

    @Override
    public void close() {
    }
}
