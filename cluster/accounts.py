"""Who may do what on the cluster: users, passwords, ACLs and quotas.

Every listener of every broker asks who is connecting (SASL) and the brokers decide what
each user may do (KRaft's StandardAuthorizer; no ACL means no access). Three kinds of user:

- `broker`: the brokers and controllers among themselves (PLAIN, on INTERNAL and CONTROLLER);
- `admin`: the course's own tools and the grader's checks, a super user (PLAIN, on INTERNAL);
- one user per namespace: a student, or one grading run (SCRAM-SHA-512). It may create, use
  and delete the topics, consumer groups and transactional ids whose names start with
  "<namespace>." and nothing else: no other namespace's data, no broker settings, no leader
  elections or reassignments, no ACLs, quotas or users. Adding partitions to an existing
  topic is not allowed either (the brokers have no hook to bound it; create a new topic).

The passwords of a local cluster live in <cluster home>/secrets.json (owner-only). The
grading sandbox cannot see that folder: a grading run's user gets its own password, passed
to the grading kernel, and is deleted when the grading ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets as _random
import time
from dataclasses import dataclass
from pathlib import Path

from .kafka_python_fix import ask
from .waiting import wait_for

SCRAM = "SCRAM-SHA-512"
PLAIN = "PLAIN"
PROTOCOL = "SASL_PLAINTEXT"
BROKER_USER = "broker"
ADMIN_USER = "admin"
SUPER_USERS = (BROKER_USER, ADMIN_USER)
SECRETS_FILE = "secrets.json"

# Per user and per broker (Kafka quotas are enforced by each broker on its own traffic).
# Generous for one student (lab 8 measures throughput well below them on a laptop) and small
# enough that one runaway grading cannot starve the others on a shared cluster.
USER_QUOTAS = {
    "producer_byte_rate": 16 * 2**20,
    "consumer_byte_rate": 32 * 2**20,
    # KIP-599: partitions created or deleted per second (a burst of about 10 s of it is allowed).
    "controller_mutation_rate": 20.0,
}
# The course's own users are not throttled (quotas apply to super users too).
UNTHROTTLED = {"producer_byte_rate": 2.0**50, "consumer_byte_rate": 2.0**50, "controller_mutation_rate": 1e6}


@dataclass(frozen=True)
class Account:
    """A user name and password, and the client settings that log in with them."""

    username: str
    password: str
    mechanism: str = SCRAM

    def kafka_python(self) -> dict[str, str]:
        """Keyword arguments for KafkaProducer, KafkaConsumer and KafkaAdminClient."""
        return {
            "security_protocol": PROTOCOL,
            "sasl_mechanism": self.mechanism,
            "sasl_plain_username": self.username,
            "sasl_plain_password": self.password,
        }

    def jaas(self) -> str:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if self.mechanism == PLAIN
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        return f'{module} required username="{self.username}" password="{self.password}";'

    def java(self) -> dict[str, str]:
        """The same as Java client properties (Spark's "kafka." options, Kafka's own tools)."""
        return {"security.protocol": PROTOCOL, "sasl.mechanism": self.mechanism, "sasl.jaas.config": self.jaas()}

    def librdkafka(self) -> dict[str, str]:
        """The same for librdkafka (confluent-kafka's Producer, Consumer and AdminClient)."""
        return {
            "security.protocol": PROTOCOL,
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }

    def __repr__(self) -> str:  # never print a password by accident
        return f"Account({self.username!r}, mechanism={self.mechanism!r})"


def new_password() -> str:
    return _random.token_urlsafe(24)


class Secrets:
    """<cluster home>/secrets.json: the passwords of one local cluster, readable by its owner
    only. Created with the cluster; a student's password is added the first time it is needed."""

    def __init__(self, home: Path):
        self.path = Path(home) / SECRETS_FILE

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def _write(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self):
        """One writer at a time across processes (notebooks, scripts, tests): a read-modify-write
        must not drop a password another process just added."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def exists(self) -> bool:
        return self.path.exists()

    def ensure(self) -> dict:
        """The secrets, with the brokers' and the admin's passwords made on first use."""
        data = self._read()
        if {BROKER_USER, ADMIN_USER} <= data.keys():
            return data
        with self._locked():
            data = self._read()
            if not {BROKER_USER, ADMIN_USER} <= data.keys():
                data.setdefault(BROKER_USER, new_password())
                data.setdefault(ADMIN_USER, new_password())
                data.setdefault("students", {})
                self._write(data)
        return data

    def broker(self) -> Account:
        return Account(BROKER_USER, self.ensure()[BROKER_USER], PLAIN)

    def admin(self) -> Account:
        return Account(ADMIN_USER, self.ensure()[ADMIN_USER], PLAIN)

    def student(self, namespace: str, create: bool = False) -> Account | None:
        password = self.ensure().get("students", {}).get(namespace)
        if password is None and create:
            with self._locked():
                data = self._read()
                password = data.setdefault("students", {}).get(namespace)
                if password is None:
                    password = data["students"][namespace] = new_password()
                    self._write(data)
        return Account(namespace, password) if password else None


def admin_client_for(client_id: str, connection: dict, **overrides):
    """A KafkaAdminClient logged in with `connection`; `overrides` (kafka-python's settings, e.g.
    bootstrap_servers: one broker only) win over it. clients.admin_client adds the default login."""
    from kafka import KafkaAdminClient

    return KafkaAdminClient(**{**connection, "client_id": client_id, **overrides})


# --- what a namespace's user may do --------------------------------------------------------
CONNECT_LEADER = "connect-cluster-"  # Kafka Connect's prefix of its leader's transactional id


def namespace_acls(user: str, namespace: str) -> list:
    """The ACLs of a namespace's user: everything a lab needs on "<namespace>." names."""
    from kafka.admin import (
        ACL,
        ACLOperation as Op,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    allowed = {
        # No ALTER: adding partitions to a topic has no budget hook in the brokers.
        ResourceType.TOPIC: (
            Op.CREATE,
            Op.DELETE,
            Op.READ,
            Op.WRITE,
            Op.DESCRIBE,
            Op.DESCRIBE_CONFIGS,
            Op.ALTER_CONFIGS,
        ),
        ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
        ResourceType.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
    }
    patterns = [(kind, namespace + ".", ops) for kind, ops in allowed.items()]
    # Connect's exactly-once source support: the leader of a group of workers fences older ones
    # with the transactional id "connect-cluster-<group.id>" (KIP-618), which no setting renames;
    # a group "<namespace>...." gives "connect-cluster-<namespace>...." (clients.namespace()
    # refuses namespaces that begin so, which would own another's).
    patterns.append((ResourceType.TRANSACTIONAL_ID, f"{CONNECT_LEADER}{namespace}.", (Op.WRITE, Op.DESCRIBE)))
    return [
        ACL(
            f"User:{user}",
            "*",
            op,
            ACLPermissionType.ALLOW,
            ResourcePattern(kind, prefix, ACLResourcePatternType.PREFIXED),
        )
        for kind, prefix, ops in patterns
        for op in ops
    ]


def read_only_acls(user: str, topics=(), groups=()) -> list:
    """DENY rules that keep a namespace's user from changing what a check's truth depends on
    (a topic the grader filled, a group the grader runs). Deny beats allow in Kafka."""
    from kafka.admin import (
        ACL,
        ACLOperation as Op,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    def deny(kind, name, op):
        return ACL(
            f"User:{user}", "*", op, ACLPermissionType.DENY, ResourcePattern(kind, name, ACLResourcePatternType.LITERAL)
        )

    return [deny(ResourceType.TOPIC, t, op) for t in topics for op in (Op.WRITE, Op.DELETE, Op.ALTER_CONFIGS)] + [
        deny(ResourceType.GROUP, g, op) for g in groups for op in (Op.READ, Op.DELETE)
    ]


def _raise_acl_errors(result: dict, what: str) -> None:
    failed = result.get("failed") or []
    if failed:
        raise RuntimeError(f"The brokers refused to {what}: {failed[0][1]}")


def grant(admin, account: Account, namespace: str) -> None:
    """Create (or reset) the user's SCRAM password and allow it its namespace."""
    from kafka.admin import UserScramCredentialUpsertion

    errors = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(account.username, account.mechanism, account.password)]
    )
    if errors.get(account.username):
        raise RuntimeError(
            f"The brokers refused to set the password of {account.username!r}: {errors[account.username]}"
        )
    acls = namespace_acls(account.username, namespace)
    _raise_acl_errors(admin.create_acls(acls), f"grant {account.username!r} its namespace")
    # The controller has them now; each broker learns them a moment later. The user may log in
    # at once (a grading's kernel does), so wait until every broker knows: brokers apply
    # metadata in order, and the ACLs came after the password.
    wait_until_every_broker(admin, account.username, lambda found: found >= len(acls), "learn of")


def allow_cluster_view(admin, user: str) -> None:
    """Let a user see the cluster as a whole (its brokers, the controllers' quorum): on a
    cluster of the student's own (lab 7), where the quorum is part of the lesson. Kafka has one
    cluster-level DESCRIBE: it also lets the user list every ACL (DescribeAcls), every SCRAM
    user (DescribeUserScramCredentials), every group, the log dirs and reassignments; so never
    on a cluster others use, nor on a grading's (own._with_user)."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    acl = ACL(
        f"User:{user}",
        "*",
        ACLOperation.DESCRIBE,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL),
    )
    _raise_acl_errors(admin.create_acls([acl]), f"let {user!r} see the cluster")


# What an operator does on a cluster of one's own (lab 14) and the cluster-level right each takes:
# a replication throttle and other brokers' settings (ALTER_CONFIGS, read: DESCRIBE_CONFIGS),
# moving partitions and electing leaders (ALTER; a reassignment's listing: DESCRIBE), the cluster,
# its log dirs (DESCRIBE).
OPERATOR_RIGHTS = ("ALTER", "ALTER_CONFIGS", "DESCRIBE", "DESCRIBE_CONFIGS")


def allow_operations(admin, user: str) -> None:
    """Let a user run a cluster of its own as an operator (OPERATOR_RIGHTS on the cluster). Never
    on a cluster others use: Kafka's cluster ALTER is also what creates and deletes ACLs and SCRAM
    users, DESCRIBE lists them (see allow_cluster_view); on a throwaway cluster of one's own (a
    grading's is deleted after it) that reaches nobody else. Returns once every broker knows."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    cluster = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL)
    acls = [
        ACL(f"User:{user}", "*", getattr(ACLOperation, op), ACLPermissionType.ALLOW, cluster) for op in OPERATOR_RIGHTS
    ]
    _raise_acl_errors(admin.create_acls(acls), f"let {user!r} run the cluster as an operator")
    # a namespace's user is named as its namespace (own.start); brokers apply metadata in order,
    # so one that counts its namespace's ACLs and these has learned these
    expected = len(namespace_acls(user, user)) + len(acls)
    wait_until_every_broker(admin, user, lambda found: found >= expected, "learn of")


def protect(admin, user: str, topics=(), groups=()) -> None:
    """Make topics and groups read-only for a namespace's user (see read_only_acls)."""
    acls = read_only_acls(user, topics, groups)
    if acls:
        _raise_acl_errors(admin.create_acls(acls), f"protect {list(topics) + list(groups)}")


def revoke(admin, user: str) -> None:
    """Delete the user's password and every ACL that names it."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
        UserScramCredentialDeletion,
    )
    from kafka.errors import ResourceNotFoundError

    try:  # the password first: once the ACLs are gone everywhere, so is the password (metadata is ordered)
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, SCRAM)])
    except ResourceNotFoundError:
        pass
    everything = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
    admin.delete_acls([ACLFilter(f"User:{user}", None, ACLOperation.ANY, ACLPermissionType.ANY, everything)])
    wait_until_every_broker(admin, user, lambda found: found == 0, "forget")


def acl_count_on(admin, node_id: int, user: str) -> int:
    """How many ACLs naming the user one broker knows (asked of that broker itself)."""
    from kafka.admin import ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourceType
    from kafka.protocol.admin import DescribeAclsRequest

    request = DescribeAclsRequest(
        resource_type_filter=ResourceType.ANY,
        resource_name_filter=None,
        pattern_type_filter=ACLResourcePatternType.ANY,
        principal_filter=f"User:{user}",
        host_filter=None,
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
    )
    response = ask(admin, request, node_id)
    return sum(len(r.acls) for r in response.resources)


DOWN = "down"  # a broker wait_until_every_broker left out
DOWN_AFTER_S = 5.0  # unreachable this long: down, not just back


def wait_until_every_broker(admin, user: str, done, what: str, timeout_s: float = 30.0) -> None:
    """Wait, bounded, until every live broker's ACLs for `user` satisfy done(count). A broker
    that cannot be reached for DOWN_AFTER_S is left out: it has died (the cluster lists a
    killed broker until its session times out), and it replays the metadata, these rights
    included, before it serves again."""
    from kafka.errors import KafkaConnectionError, NodeNotReadyError, RequestTimedOutError, UnknownBrokerIdError

    brokers = [b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]
    unreachable = (UnknownBrokerIdError, NodeNotReadyError, KafkaConnectionError, RequestTimedOutError)
    unreachable_since: dict[int, float] = {}
    for node in brokers:

        def count(node=node):
            try:
                return acl_count_on(admin, node, user)
            except unreachable:
                # a broker just back from a crash: listed by the cluster before this client's metadata
                # or connection has caught up with it (seen in CI: UnknownBrokerIdError); or dead
                admin._manager.cluster.request_update()
                if time.monotonic() - unreachable_since.setdefault(node, time.monotonic()) > DOWN_AFTER_S:
                    return DOWN
                raise

        waited = wait_for(
            count,
            timeout_s=timeout_s,
            until=lambda found: found == DOWN or done(found),
            every_s=0.05,
            retry_on=unreachable,
        )
        if not waited:
            last = waited.last if isinstance(waited.last, Exception) else f"it knows {waited.last} ACLs"
            raise RuntimeError(
                f"Broker {node} did not {what} the rights of {user!r} within {timeout_s:.0f} s "
                f"(last: {last}); see `python -m cluster status`."
            )


def users(admin) -> list[str]:
    """The SCRAM users the cluster knows."""
    return sorted(admin.describe_user_scram_credentials())


# --- quotas ----------------------------------------------------------------------------------
def set_quotas(admin, user: str | None, quotas: dict[str, float]) -> None:
    """Set a user's quotas (user=None: the default for every user without quotas of its own).
    kafka-python has the AlterClientQuotas message but no method for it yet; this sends it."""
    from kafka.protocol.admin import AlterClientQuotasRequest as Req

    entry = Req.EntryData(
        entity=[Req.EntryData.EntityData(entity_type="user", entity_name=user)],
        ops=[Req.EntryData.OpData(key=k, value=float(v), remove=False) for k, v in quotas.items()],
    )
    response = ask(admin, Req(entries=[entry], validate_only=False))
    for result in response.entries:
        if result.error_code:
            raise RuntimeError(
                f"The brokers refused quotas for {user or 'every user'}: "
                f"{result.error_message} (error {result.error_code})"
            )


def describe_quotas(admin, user: str | None) -> dict[str, float]:
    """The quotas set on exactly this user (None: the default user)."""
    from kafka.protocol.admin import DescribeClientQuotasRequest as Req

    match_type = 1 if user is None else 0  # 0: exactly this name, 1: the default user
    request = Req(components=[Req.ComponentData(entity_type="user", match_type=match_type, match=user)], strict=True)
    response = ask(admin, request)
    if response.error_code:
        raise RuntimeError(f"Describing quotas failed: {response.error_message}")
    return {v.key: v.value for entry in response.entries or [] for v in entry.values}


def setup_cluster(admin) -> None:
    """What every cluster needs once it runs: default quotas for every user, none for the
    course's own. Idempotent."""
    set_quotas(admin, None, USER_QUOTAS)
    for user in SUPER_USERS:
        set_quotas(admin, user, UNTHROTTLED)
