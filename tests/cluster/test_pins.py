"""Every version is pinned once, in pyproject.toml, and the pieces agree with each other."""

from cluster import jars, settings


def test_kafka_image_runs_the_same_release_as_the_local_cluster():
    assert settings.pins()["images"]["kafka"] == f"apache/kafka:{settings.kafka_version()}"


def test_kafka_tools_come_from_the_brokers_release():
    tools = [c for c in settings.pins()["maven"]["kafka-tools"] if ":kafka-tools:" in c][0]
    assert tools.rstrip("!").endswith(":" + settings.kafka_version())


def test_spark_jars_and_image_match_pyspark():
    pyspark = settings.python_pins()["pyspark"]
    spark_jars = [c for c in settings.pins()["maven"]["spark-kafka"] if c.startswith("org.apache.spark:")]
    assert [c for c in spark_jars if "spark-sql-kafka" in c], "the Kafka connector is in the bundle"
    assert all(c.rstrip("!").endswith(":" + pyspark) for c in spark_jars), spark_jars  # the connector, spark-avro
    assert settings.pins()["images"]["spark"] == f"apache/spark:{pyspark}"


def test_every_python_dependency_is_pinned_exactly():
    import tomllib

    project = tomllib.loads(settings.PYPROJECT.read_text())["project"]
    deps = [*project["dependencies"], *(d for group in project["optional-dependencies"].values() for d in group)]
    assert all("==" in d for d in deps), [d for d in deps if "==" not in d]


def test_lock_file_matches_what_the_pins_resolve_to():
    assert jars.lock_differences() == []


def imports_not_in(folders: set[str], pinned: set[str]) -> dict[str, set[str]]:
    """Third-party packages imported in `folders` (of the course) whose distributions are not
    among `pinned`: package -> the files importing it."""
    import ast
    import importlib.metadata
    import sys

    distributions = importlib.metadata.packages_distributions()
    ours = {"autograder", "selfcheck", "staff", "cluster", "bench", "hub", "tests"}
    # on the tests' path: tests/layers.py, and a test module's siblings (pytest puts its folder first)
    ours |= {p.stem for p in (settings.ROOT / "tests").rglob("*.py")}
    missing = {}
    for folder in sorted(folders):
        for path in (settings.ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    else []
                )
                for top in {n.split(".")[0] for n in names} - ours - set(sys.stdlib_module_names):
                    dists = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
                    if not dists & pinned:
                        missing.setdefault(top, set()).add(path.relative_to(settings.ROOT).as_posix())
    return missing


def normalized(names) -> set[str]:
    return {name.split("==")[0].lower().replace("_", "-") for name in names}


def test_every_package_the_code_imports_is_pinned():
    """A package imported directly but arriving only through another could change under us when
    that other one is upgraded: each must be pinned itself."""
    every = {"autograder", "selfcheck", "staff", "cluster", "bench", "hub", "tests"}
    assert imports_not_in(every, normalized(settings.python_pins())) == {}, "imported but not pinned in pyproject.toml"


def test_what_a_lab_and_a_grading_run_needs_no_extra():
    """The student kit, the users' environment on a hub and Gradescope's image install
    [project.dependencies] alone: the code they run imports nothing from the test or hub extras."""
    project = settings.pyproject()["project"]
    runtime = normalized(project["dependencies"])
    assert not runtime & normalized(d for group in project["optional-dependencies"].values() for d in group)
    assert not runtime & {"pytest", "pytest-xdist", "pytest-timeout", "jupyterhub", "playwright"}
    assert imports_not_in({"selfcheck", "cluster", "autograder", "staff"}, runtime) == {}


def locked(name: str) -> dict[str, str]:
    """requirements/<name>.txt as package -> version (PEP 503 names), each line checked to carry hashes."""
    import re

    text = (settings.ROOT / "requirements" / f"{name}.txt").read_text()
    assert "#    make lock" in text, f"requirements/{name}.txt was not written by `make lock`"
    found = {}
    for block in re.split(r"\n(?=\S)", text):
        m = re.match(r"([A-Za-z0-9_.-]+)==([^ \\;\n]+)", block)
        if m:
            assert "--hash=sha256:" in block, f"{m.group(1)} in requirements/{name}.txt has no hash"
            found[re.sub(r"[-_.]+", "-", m.group(1).lower())] = m.group(2)
    return found


def test_the_lock_files_hold_every_pin_and_agree():
    """requirements/*.txt are what `make lock` writes from pyproject.toml: every pin at its version
    (a pin changed without `make lock` fails here), hub and runtime with dev's versions, and the
    test and hub extras only where they belong."""
    import re

    project = settings.pyproject()["project"]
    extras = project["optional-dependencies"]

    def pins(*groups):
        deps = [*project["dependencies"], *(d for g in groups for d in extras[g])]
        return {re.sub(r"[-_.]+", "-", d.split("==")[0].lower()): d.split("==")[1] for d in deps}

    dev, hub, runtime = locked("dev"), locked("hub"), locked("runtime")
    for name, lock, wanted in (
        ("dev", dev, pins("test", "hub")),
        ("hub", hub, pins("hub")),
        ("runtime", runtime, pins()),
    ):
        stale = {p: (v, lock.get(p)) for p, v in wanted.items() if lock.get(p) != v}
        assert not stale, f"requirements/{name}.txt is stale (pin, locked): {stale}; run `make lock`"
    assert {p: v for p, v in hub.items() if dev.get(p) != v} == {}
    assert {p: v for p, v in runtime.items() if dev.get(p) != v} == {}
    assert not {"pytest", "jupyterhub", "playwright"} & set(runtime) and not {"pytest", "playwright"} & set(hub)


def test_a_read_only_cache_finds_every_bundle_by_the_lock():
    """In the grading sandbox the jars cache is read-only and jgo cannot open some bundles there
    (it links kafka-tools' folder again on every call): jars.jars() then names the lock's files,
    which must be the very jars jgo gives (the tools' class archive is made for those paths)."""
    for name in settings.pins()["maven"]:
        assert jars.locked_jars(name) == jars.jars(name), name
