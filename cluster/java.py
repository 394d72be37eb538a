"""Find a Java 17+ runtime: JAVA_HOME first, then the PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache

from . import settings
from .errors import ClusterError

MIN_JAVA = 17
INSTALL_HINT = (
    "Install a JDK 17 or newer (a JDK, not only a runtime: for example `sudo apt install openjdk-17-jdk-headless`, "
    "`brew install openjdk@17`, or Temurin 17 from adoptium.net) and make sure "
    "`java -version` shows it, or set JAVA_HOME to it."
)


@cache
def java_executable() -> str:
    """Path of a `java` of version 17 or newer; a ClusterError says what to install if not."""
    home = settings.env("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on the PATH"
        raise ClusterError(f"Java was not found ({where}).", hint=INSTALL_HINT)
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise ClusterError(
            f"{java} is Java {major}; Kafka 4 and Spark 4 need Java {MIN_JAVA} or newer.", hint=INSTALL_HINT
        )
    return java


def java_major_version(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise ClusterError(f"Could not read the version of {java}: {out.stderr.strip()[:200]}", hint=INSTALL_HINT)
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 else major  # "1.8.0" is Java 8
