"""The brokers, not the grader's Python, decide what a namespace's user may do.

Everything here runs as the test namespace's own user (what a student or a grading run is),
with kafka-python and with a second client, librdkafka through confluent-kafka, and with
kafka-python's raw protocol where its methods would refuse the call on the client side
before the brokers could."""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewPartitions,
    NewTopic,
    ResourcePattern,
    ResourceType,
    UserScramCredentialUpsertion,
)
from kafka.errors import CoordinatorNotAvailableError, KafkaError
from kafka.structs import OffsetAndMetadata

from cluster import accounts, connection, namespace, settings
from cluster.clients import group_ids
from cluster.waiting import wait_for
from refusals import BROKER_REFUSED
from refusals import refused as refused_as

# The brokers' refusal, or a message that names the permission a call lacked ("needs READ permission")
REFUSED = re.compile(BROKER_REFUSED.pattern + r"|needs \w+ permission")


def refused(call) -> str:
    return refused_as(call, REFUSED)


@pytest.fixture(scope="module")
def me(cluster) -> dict:
    """The test namespace's user ("test"), as a notebook gets it."""
    return connection()


@pytest.fixture(scope="module")
def mine(me):
    a = KafkaAdminClient(**me, client_id="student-admin")
    yield a
    a.close()


@pytest.fixture(scope="module")
def classmate(cluster):
    """Another namespace with a topic holding three records and a group that committed."""
    ns = f"other-{uuid.uuid4().hex[:6]}"
    cluster.add_student(ns)
    topic, group = f"{ns}.flights", f"{ns}.readers"
    root = cluster.admin()
    root.create_topics([NewTopic(topic, 2, 3)])
    root.wait_for_topics([topic])
    producer = KafkaProducer(**cluster.admin_connection())
    for i in range(3):
        producer.send(topic, b"secret %d" % i, partition=0)
    producer.close()
    deadline = time.monotonic() + 60  # a new cluster makes its offsets topic on first use
    while True:
        try:
            root.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
            break
        except CoordinatorNotAvailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    yield ns, topic, group
    root.delete_topics([topic])
    accounts.revoke(root, ns)
    root.close()


@pytest.fixture
def my_topic(mine):
    name = f"{namespace()}.acl-{uuid.uuid4().hex[:8]}"
    mine.create_topics([NewTopic(name, 1, 3)])
    mine.wait_for_topics([name])
    yield name
    mine.delete_topics([name])


def test_my_namespace_is_mine_to_use(me, mine, my_topic):
    producer = KafkaProducer(**me, acks="all", enable_idempotence=True)
    producer.send(my_topic, b"hello").get(30)
    producer.close()
    consumer = KafkaConsumer(
        my_topic, **me, group_id=f"{namespace()}.readers", auto_offset_reset="earliest", consumer_timeout_ms=10_000
    )
    assert [m.value for m in consumer] == [b"hello"]
    consumer.commit()
    consumer.close()
    assert mine.list_group_offsets(f"{namespace()}.readers")
    transactional = KafkaProducer(**me, transactional_id=f"{namespace()}.tx")
    transactional.init_transactions()
    transactional.begin_transaction()
    transactional.send(my_topic, b"in a transaction")
    transactional.commit_transaction()
    transactional.close()


def test_every_cluster_level_operation_is_refused(mine, my_topic):
    from kafka.protocol.admin import IncrementalAlterConfigsRequest as Alter

    def broker_setting(resource_name):
        # The raw request: kafka-python's alter_configs would refuse first, on the client side.
        res = Alter.AlterConfigsResource(
            resource_type=4,
            resource_name=resource_name,
            configs=[
                Alter.AlterConfigsResource.AlterableConfig(
                    name="log.cleaner.dedupe.buffer.size", config_operation=0, value=str(2**30)
                )
            ],
        )
        node = {"node_id": int(resource_name)} if resource_name else {}  # a broker's own setting goes to it
        response = mine._manager.run(lambda: mine._manager.send(Alter(resources=[res], validate_only=False), **node))
        return [(r.error_code, r.error_message) for r in response.responses]

    any_acl = ResourcePattern(ResourceType.TOPIC, "", ACLResourcePatternType.PREFIXED)
    refusals = {
        "a broker's settings": lambda: broker_setting("1"),
        "every broker's settings": lambda: broker_setting(""),
        "leader election": lambda: mine.elect_leaders(0, [TopicPartition(my_topic, 0)]),
        "partition reassignment": lambda: mine.alter_partition_reassignments({TopicPartition(my_topic, 0): [1, 2, 3]}),
        "ACLs": lambda: mine.create_acls(
            [ACL(f"User:{namespace()}", "*", ACLOperation.ALL, ACLPermissionType.ALLOW, any_acl)]
        ),
        "passwords": lambda: mine.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("mallory", "SCRAM-SHA-512", "pw")]
        ),
        "quotas": lambda: accounts.set_quotas(mine, namespace(), {"producer_byte_rate": 1e12}),
        "the quorum": lambda: mine.describe_metadata_quorum(),
        "features": lambda: mine.update_features({"metadata.version": 1}),
        "partitions of a topic of mine": lambda: mine.create_partitions({my_topic: NewPartitions(8)}),
    }
    for what, call in refusals.items():
        try:
            refused(call)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None
    # broker 2's error code for the broker setting: cluster authorization failed (31)
    assert broker_setting("2")[0][0] == 31


def test_another_namespace_can_be_neither_read_nor_written(me, mine, classmate):
    ns, topic, group = classmate
    assert topic not in mine.list_topics()  # not even listed
    assert group not in group_ids(mine)
    producer = KafkaProducer(**me, max_block_ms=10_000)
    refused(lambda: producer.send(topic, b"spam").get(10))
    producer.close()
    consumer = KafkaConsumer(**me)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    read = []
    try:
        for _ in range(5):
            read += [r.value for batch in consumer.poll(timeout_ms=1_000).values() for r in batch]
    except Exception as e:  # refused outright, or nothing read: both keep the records secret
        assert REFUSED.search(f"{type(e).__name__}: {e}"), e
    assert read == []
    consumer.close()
    refused(lambda: mine.delete_topics([topic]))
    refused(lambda: mine.create_topics([NewTopic(f"{ns}.planted", 1, 3)]))
    refused(lambda: mine.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)}))
    refused(lambda: mine.delete_groups([group]))
    described = mine.describe_topics([topic])[0]
    assert described["error_code"] == 29 and described["partitions"] == []  # 29: topic authorization failed
    joiner = KafkaConsumer(topic, **me, group_id=group, consumer_timeout_ms=5_000)
    refused(lambda: joiner.poll(timeout_ms=5_000) or "joined")
    joiner.close()


def test_creating_partitions_past_the_budget_is_refused(mine):
    budget = settings.PARTITION_BUDGET
    names = [f"{namespace()}.budget-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    try:
        mine.create_topics([NewTopic(names[0], budget // 2 + 5, 3)])
        with pytest.raises(Exception, match="PolicyViolation") as caught:
            mine.create_topics([NewTopic(names[1], budget // 2 + 5, 3)])
        assert "may hold" in str(caught.value)
        with pytest.raises(Exception, match="PolicyViolation"):
            mine.create_topics([NewTopic(names[1], budget + 1, 3)])
    finally:
        mine.delete_topics([n for n in names if n in mine.list_topics()])


def test_the_budget_counts_topics_the_moment_they_are_made(cluster):
    """The metadata the policy reads lags the controller; topics made in a quick loop still count."""
    ns = f"burst-{uuid.uuid4().hex[:6]}"
    mine = KafkaAdminClient(**cluster.add_student(ns).kafka_python(), bootstrap_servers=cluster.bootstrap_servers)
    names = [f"{ns}.t{i}" for i in range(4)]
    made = []
    try:
        for name in names:
            try:
                mine.create_topics([NewTopic(name, 30, 3)])
                made.append(name)
            except Exception as e:
                assert "PolicyViolation" in f"{type(e).__name__} {e}", e
        assert len(made) == settings.PARTITION_BUDGET // 30
    finally:
        if made:
            mine.delete_topics(made)
        accounts.revoke(cluster.admin(), ns)
        mine.close()


def test_a_second_client_meets_the_same_rules(me, classmate, cluster):
    """librdkafka (confluent-kafka): no client-side checks, so the brokers answer every call."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.admin import NewTopic as CNewTopic

    conf = {
        "bootstrap.servers": me["bootstrap_servers"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": me["sasl_plain_username"],
        "sasl.password": me["sasl_plain_password"],
    }
    admin = AdminClient(conf)
    poison = ConfigResource(
        "BROKER",
        "1",
        incremental_configs=[ConfigEntry("message.max.bytes", "100", incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([poison]).values():
        with pytest.raises(KafkaException, match="(?i)authori"):
            future.result(30)
    ns, topic, _ = classmate
    for future in admin.delete_topics([topic], operation_timeout=10).values():
        with pytest.raises(KafkaException, match="(?i)authori"):
            future.result(30)
    for future in admin.create_topics([CNewTopic(f"{namespace()}.huge", settings.PARTITION_BUDGET + 1, 3)]).values():
        with pytest.raises(KafkaException, match="(?i)polic"):
            future.result(30)
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 10_000})
    producer.produce(topic, b"spam", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert errors and errors[0] is not None and "AUTHORIZATION" in errors[0].name()
    del producer, admin
    # and the brokers kept their settings
    root = cluster.admin()
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType

    found = root.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1")])
    root.close()
    assert "'message.max.bytes': '100'" not in repr(found).replace('"', "'")


def test_a_huge_request_on_a_topic_of_mine_is_refused_and_no_broker_falls(cluster, me, mine):
    """A user may raise max.message.bytes on its own topics, up to what the course allows
    (TOPIC_LIMITS); the brokers still refuse a request too large for their small heaps instead
    of reading it."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    name = f"{namespace()}.huge-{uuid.uuid4().hex[:6]}"
    most = str(settings.TOPIC_LIMITS["max.message.bytes"][1])
    mine.create_topics([NewTopic(name, 1, 3, topic_configs={"max.message.bytes": most})])
    mine.wait_for_topics([name])
    try:
        # the setting itself was the user's to make; the broker asked may learn it a moment late
        deadline = time.monotonic() + 15
        configs = mine.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        while most not in repr(configs) and time.monotonic() < deadline:
            time.sleep(0.2)
            configs = mine.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        assert most in repr(configs)
        jvms = {n.id: n.pid for n in cluster.nodes.values()}
        producer = KafkaProducer(
            **me,
            max_request_size=50 * 2**20,
            retries=0,
            request_timeout_ms=10_000,
            delivery_timeout_ms=20_000,
            linger_ms=0,
        )
        sent = producer.send(name, b"x" * (40 * 2**20))
        with pytest.raises(KafkaError) as refused:
            sent.get(120)  # the client's own delivery timeout ends it well before, even on a busy machine
        # the send itself failed (the broker closed the connection or answered with an error), not
        # our wait for it: under load a 30 s wait once ran out first and the test passed on that
        assert sent.is_done and sent.failed(), refused.value
        print("refused with", repr(refused.value))
        producer.close(timeout=30)
        small = KafkaProducer(**me, acks="all")
        small.send(name, b"still fine").get(30)  # the brokers go on serving
        small.close()
        assert {n.id: n.pid for n in cluster.nodes.values()} == jvms
    finally:
        mine.delete_topics([name])


def test_a_wrong_password_or_no_login_gets_nothing(cluster):
    from kafka.errors import KafkaError

    servers = cluster.bootstrap_servers
    for login in (
        {},
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": namespace(),
            "sasl_plain_password": "guess",
        },
    ):
        with pytest.raises(KafkaError):
            KafkaAdminClient(
                bootstrap_servers=servers, bootstrap_timeout_ms=5_000, request_timeout_ms=5_000, **login
            ).list_topics()


def test_a_removed_user_can_no_longer_log_in(cluster):
    from kafka.errors import KafkaError

    ns = f"gone-{uuid.uuid4().hex[:6]}"
    account = cluster.add_student(ns)
    root = cluster.admin()
    assert ns in accounts.users(root)
    accounts.revoke(root, ns)
    deadline = time.monotonic() + 15  # the brokers learn it from the controller a moment later
    while ns in accounts.users(root) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ns not in accounts.users(root)
    root.close()
    with pytest.raises(KafkaError):
        KafkaAdminClient(
            bootstrap_servers=cluster.bootstrap_servers, bootstrap_timeout_ms=5_000, **account.kafka_python()
        ).list_topics()


def test_quotas_are_set_for_every_user_and_lifted_for_the_course(cluster):
    with cluster.admin() as root:
        assert accounts.describe_quotas(root, None) == {k: float(v) for k, v in accounts.USER_QUOTAS.items()}
        for user in accounts.SUPER_USERS:
            assert accounts.describe_quotas(root, user) == accounts.UNTHROTTLED


def test_a_broker_this_client_does_not_know_yet_is_waited_for_then_named(cluster):
    # a broker back from a crash is listed by the cluster before an admin client's metadata holds it
    # (CI once: `start-broker 3` died on UnknownBrokerIdError); the wait retries, then says so
    admin = cluster.admin()
    listed = admin.describe_cluster

    def with_a_newcomer():
        found = listed()
        return {**found, "brokers": found["brokers"] + [{"broker_id": 99}]}

    admin.describe_cluster = with_a_newcomer
    try:
        with pytest.raises(RuntimeError, match=r"Broker 99 did not learn of .* \(last: UnknownBrokerIdError"):
            accounts.wait_until_every_broker(admin, "nobody", lambda found: True, "learn of", timeout_s=2)
    finally:
        admin.close()


def test_a_login_made_while_a_broker_is_down_works_everywhere_once_it_is_back(healthy):
    # The cluster lists a killed broker until its session times out; the wait for the rights
    # leaves it out after DOWN_AFTER_S instead of failing (it replays them before it serves).
    account = accounts.Account(f"downtest{uuid.uuid4().hex[:6]}", accounts.new_password())
    with healthy.admin() as root:
        # connected to every broker first: kafka-python sends an admin request to the least loaded
        # broker, preferring one it is connected to, and does not try another if that one refuses
        for node in settings.NODE_IDS:
            accounts.acl_count_on(root, node, account.username)
        try:
            with healthy.stopped(broker=3, kill=True):
                accounts.grant(root, account, account.username)

            # Broker 3 is back once it takes the course's probe login; a login written while it was
            # down can be refused a moment longer (CI saw it once), so the new login gets a deadline
            def logs_in_on_broker_3() -> bool:
                with KafkaAdminClient(
                    bootstrap_servers=f"127.0.0.1:{healthy.cfg.port(3)}", **account.kafka_python()
                ) as topics:
                    return topics.list_topics() is not None  # logged in on broker 3, rights known

            waited = wait_for(logs_in_on_broker_3, timeout_s=30, every_s=0.5, retry_on=(KafkaError,))
            assert waited, f"broker 3 refused the new login for 30 s after it was back (last: {waited.last})"
        finally:
            accounts.revoke(root, account.username)


def test_clean_deletes_ones_own_topics_and_groups_and_nothing_else(cluster, me, mine, classmate):
    """`python -m cluster clean`, as a student: the namespace's topics and committed groups go,
    a classmate's stay (the brokers would refuse it their deletion anyway)."""
    import subprocess
    import sys

    ns = f"cleaner-{uuid.uuid4().hex[:6]}"
    cluster.add_student(ns)
    env = dict(os.environ, LAB_NAMESPACE=ns)
    topic, group = f"{ns}.flights", f"{ns}.readers"
    login = {"bootstrap_servers": me["bootstrap_servers"], **cluster.secrets.student(ns).kafka_python()}
    admin = KafkaAdminClient(**login)
    admin.create_topics([NewTopic(topic, 2, 3)])
    producer = KafkaProducer(**login)
    producer.send(topic, b"x").get(30)
    producer.close()
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
    assert topic in admin.list_topics() and group in group_ids(admin)
    out = subprocess.run(
        [sys.executable, "-m", "cluster", "clean"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert f"Namespace '{ns}': deleted 1 topic(s) and 1 consumer group(s)." in out.stdout
    assert topic not in admin.list_topics() and group not in group_ids(admin)
    admin.close()
    root = cluster.admin()
    assert classmate[1] in root.list_topics() and classmate[2] in group_ids(root)
    accounts.revoke(root, ns)
    root.close()
