"""The course on a JupyterHub of one machine: local users, one shared Kafka cluster with a
namespace and a login per user, nbgrader's exchange between the instructors and the students.

    sudo -E make hub     (-E keeps the COURSE_HUB_* settings; or, as root: python -m hub install, then run)

The hub's settings are environment variables (cluster/settings.py lists them: COURSE_HUB_*);
hub/course_hub.py does the work, hub/jupyterhub_config.py wires it into JupyterHub.
"""
