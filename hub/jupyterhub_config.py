# The course's JupyterHub on one machine: `sudo make hub`, or as root from the course's
# environment: jupyterhub -f hub/jupyterhub_config.py
# Everything course-specific is in hub/course_hub.py; its settings are COURSE_HUB_* variables
# (README: On a hosted JupyterHub). Add your own settings (idle culling, ...) below.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout the hub runs from

from cluster.settings import env
from hub import course_hub

c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by JupyterHub

# This file only reads: `python -m hub prepare` (run by `python -m hub run`) checked and made
# everything first, refusing to start the hub, saying what to do, rather than fail a user later.
who = course_hub.roles()
subdomain_host = env("COURSE_HUB_SUBDOMAIN_HOST")
configs = course_hub.prepared()

# Who: local users of this machine (PAM) on the roster; nobody else.
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(who)
c.Authenticator.admin_users = {env("COURSE_HUB_ADMIN")} if env("COURSE_HUB_ADMIN") else set()

# Where: the hub's database and cookie secret in the state folder's private part.
private = course_hub.private_dir()
c.JupyterHub.bind_url = env("COURSE_HUB_URL")
# Users log in with their machine passwords: serve HTTPS (or put a TLS proxy in front).
if env("COURSE_HUB_SSL_CERT"):
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = env("COURSE_HUB_SSL_CERT"), env("COURSE_HUB_SSL_KEY")
if subdomain_host:
    c.JupyterHub.subdomain_host = subdomain_host
c.JupyterHub.db_url = f"sqlite:///{private / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(private / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(private / "jupyterhub-proxy.pid")
c.ConfigurableHTTPProxy.command = [course_hub.proxy()]

# Each user's server: a process of their own user (LocalProcessSpawner), from the course's
# environment, in their home folder, opening JupyterLab.
c.Spawner.cmd = [str(course_hub.user_env() / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
# Nothing of the hub's own environment (root's paths, its cluster settings) leaks into a server.
c.Spawner.env_keep = ["LANG", "LC_ALL", "TZ"]
c.Spawner.pre_spawn_hook = course_hub.pre_spawn_hook(configs, who)
# A stopped server's Kafka login is revoked (a new one at the next start).
c.Spawner.post_stop_hook = course_hub.post_stop_hook()
# Starting a server includes the user's Kafka login (a few seconds on a busy cluster).
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
