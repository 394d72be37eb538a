"""The course on a JupyterHub of one machine: local users, one shared Kafka cluster with a
namespace and a login per user, nbgrader's exchange between the instructors and the students.

    sudo make hub        (or, as root: jupyterhub -f hub/jupyterhub_config.py)

The hub's settings are environment variables (cluster/settings.py lists them: COURSE_HUB_*);
hub/course_hub.py does the work, hub/jupyterhub_config.py wires it into JupyterHub.
"""
