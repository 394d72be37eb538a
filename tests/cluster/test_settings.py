"""The one place for ports, folders and broker settings."""

from cluster import settings
from cluster.settings import Settings


def test_every_port_is_distinct_and_in_its_block():
    cfg = Settings(home=settings.ROOT / "x")
    ports = [cfg.port(n, name) for n in settings.NODE_IDS for name in settings.LISTENERS]
    assert len(set(ports)) == 9
    assert [cfg.port(n) for n in settings.NODE_IDS] == [9092, 9093, 9094]
    assert cfg.port(1, "CONTROLLER") == 9292


def test_broker_properties_make_a_combined_kraft_node():
    props = Settings(home=settings.ROOT / "x", port_base=19092).broker_properties(2, "b", "a")
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19292,2@127.0.0.1:19293,3@127.0.0.1:19294"
    assert props["listeners"].split(",") == [
        "EXTERNAL://127.0.0.1:19093",
        "INTERNAL://127.0.0.1:19193",
        "CONTROLLER://127.0.0.1:19293",
    ]
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    # every listener asks for a login, and no ACL means no access
    assert (
        props["listener.security.protocol.map"]
        == "EXTERNAL:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
    )
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert 'user_admin="a"' in props["listener.name.internal.plain.sasl.jaas.config"]
    assert "user_admin" not in props["listener.name.controller.plain.sasl.jaas.config"]
    assert props["course.policy.bootstrap.servers"] == "127.0.0.1:19193"


def test_course_ports_are_below_the_ephemeral_range():
    for base in (
        settings.DEFAULT_PORT_BASE,
        settings.TEST_PORT_BASE,
        settings.THROWAWAY_PORT_BASE,
        settings.BENCH_PORT_BASE,
        *settings.OWN_PORT_BASES,
    ):
        cfg = Settings(home=settings.ROOT, port_base=base, metrics=True)
        assert max(p for n in range(1, settings.OWN_NODES + 1) for p in cfg.ports(n).values()) < 32768


def test_test_cluster_never_shares_ports_with_the_lab_cluster():
    lab, test = Settings(home=settings.ROOT), Settings(home=settings.ROOT, port_base=settings.TEST_PORT_BASE)
    lab_ports = {lab.port(n, l) for n in settings.NODE_IDS for l in settings.LISTENERS}
    test_ports = {test.port(n, l) for n in settings.NODE_IDS for l in settings.LISTENERS}
    assert not lab_ports & test_ports


def test_own_clusters_never_share_a_port():
    """The clusters of one's own (four nodes each with lab 14's added broker, and their metrics
    pages), with each other and with every other cluster of the kit."""

    def ports(base):
        own = base in settings.OWN_PORT_BASES
        cfg = Settings(home=settings.ROOT, port_base=base, metrics=own)
        nodes = range(1, settings.OWN_NODES + 1) if own else settings.NODE_IDS
        return {p for n in nodes for p in cfg.ports(n).values()}

    seen: set[int] = set()
    second_test_process = settings.TEST_PORT_BASE + settings.TEST_WORKER_PORT_STEP
    for base in (
        settings.DEFAULT_PORT_BASE,
        19092,
        settings.TEST_PORT_BASE,
        second_test_process,
        settings.THROWAWAY_PORT_BASE,
        settings.BENCH_PORT_BASE,
        *settings.OWN_PORT_BASES,
    ):
        assert not ports(base) & seen, base
        seen |= ports(base)


def kit_sources():
    for folder in ("selfcheck", "autograder", "staff", "cluster", "bench", "hub"):
        yield from (settings.ROOT / folder).rglob("*.py")


def test_the_environment_is_read_in_one_place():
    """os.environ.get("X"), os.getenv("X") and os.environ["X"] appear only in cluster/settings.py:
    its ENVIRONMENT table is the whole list of what can be set from outside, with defaults."""
    import ast

    found = []
    for path in kit_sources():
        if path == settings.ROOT / "cluster" / "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            target = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                if ast.unparse(node.func) in ("os.environ.get", "os.getenv", "environ.get"):
                    target = node.args[0].value
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and ast.unparse(node.value) in ("os.environ", "environ")
                and isinstance(node.slice, ast.Constant)
            ):
                target = node.slice.value
            if target and target != "PATH":
                found.append(f"{path.relative_to(settings.ROOT)}:{node.lineno} reads {target}")
    assert found == []


def test_every_variable_read_has_its_reason_and_the_readme_names_the_users_ones(monkeypatch):
    readme = (settings.ROOT / "README.md").read_text()
    for name, (default, why) in settings.ENVIRONMENT.items():
        assert why, name
        monkeypatch.setenv(name, "")
        assert settings.env(name) == default  # set but empty: the default
        monkeypatch.setenv(name, "x")
        assert settings.env(name) == "x"
    internal = {
        "COURSE_OWN_CLUSTER",
        "COURSE_SHARE_MEMBER_CLASSPATH",
        "XDG_CACHE_HOME",
    }  # the grader's, and freedesktop's
    assert [n for n in settings.ENVIRONMENT if n not in internal and n not in readme] == []
