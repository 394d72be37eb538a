# The brokers of docker-compose.yml: Apache Kafka's image plus the course's topic policy (the
# partition budget per namespace and the bounds on its topics' settings, cluster/policy/), compiled here as `python -m cluster up`
# compiles it for the local cluster. Image tags are pinned in pyproject.toml
# [tool.course.images] (checked by tests/cluster/test_compose.py).
ARG KAFKA_IMAGE=apache/kafka:4.3.1
ARG JDK_IMAGE=eclipse-temurin:17-jdk

FROM ${KAFKA_IMAGE} AS kafka

FROM ${JDK_IMAGE} AS policy
COPY --from=kafka /opt/kafka/libs/ /kafka-libs/
COPY cluster/policy/*.java /src/
RUN mkdir /classes \
 && javac --release 17 -nowarn -cp "/kafka-libs/*" -d /classes /src/*.java \
 && jar cf /course-policy.jar -C /classes .

FROM ${KAFKA_IMAGE}
COPY --from=policy /course-policy.jar /opt/kafka/libs/course-policy.jar
