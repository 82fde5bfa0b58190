"""JupyterHub for a class on one machine: every learner logs in, gets JupyterLab with the
placelab kernel and their own copy of the tutorial notebooks, and every kernel links to one
shared, prebuilt engine instead of compiling its own.

    placelab prebuild --shared /opt/placelab/engine
    placelab install-kernel --prefix "$(python -c 'import sys; print(sys.prefix)')" \
        --env PLACELAB_ENGINE=/opt/placelab/engine
    PLACELAB_ENGINE=/opt/placelab/engine jupyterhub -f kernelspec/classroom/jupyterhub_config.py

Everything a course changes is read from the environment (README, "Teaching a class"):

    PLACELAB_ENGINE       the prebuilt engine (required)
    PLACELAB_NOTEBOOKS    the notebooks each learner gets a copy of (default: this repo's)
    PLACELAB_HUB_USERS    "system" (default): learners are system users who log in with their
                          password (PAM), each server runs as its user (LocalProcessSpawner).
                          "dummy": any name logs in with PLACELAB_HUB_PASSWORD, and every server
                          runs as the hub's user with its home under PLACELAB_HUB_HOMES (trials
                          and the load test, tests/classroom/load_test.py)
    PLACELAB_HUB_URL      where the hub listens (default http://0.0.0.0:8000)
    PLACELAB_HUB_CULL     idle minutes before a learner's server is stopped (default 60)
    PLACELAB_HUB_TOKEN    an API token with admin rights for a service named "course-admin"
                          (scripts that create users and start servers, as the load test does)
    PLACELAB_SIMULATE_CUDA  passed to every kernel: simulated GPUs for a class without GPUs
"""

import os
import shutil
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub provides it)

here = Path(__file__).resolve().parent
engine = os.environ.get("PLACELAB_ENGINE")
if not engine or not Path(engine, "work").is_dir():
    sys.exit(
        "PLACELAB_ENGINE must name an engine built with `placelab prebuild --shared DIR`"
        f" (it is {engine!r})"
    )
notebooks = Path(os.environ.get("PLACELAB_NOTEBOOKS", here.parent.parent / "notebooks"))

c.JupyterHub.bind_url = os.environ.get("PLACELAB_HUB_URL", "http://0.0.0.0:8000")
hub_port = os.environ.get("PLACELAB_HUB_API_PORT")
if hub_port:
    c.JupyterHub.hub_port = int(hub_port)
proxy_api = os.environ.get("PLACELAB_PROXY_API_URL")
if proxy_api:
    c.ConfigurableHTTPProxy.api_url = proxy_api
chp = os.environ.get("PLACELAB_CHP")
if chp:
    c.ConfigurableHTTPProxy.command = [chp]
state = os.environ.get("PLACELAB_HUB_STATE")
if state:
    Path(state).mkdir(parents=True, exist_ok=True)
    c.JupyterHub.db_url = f"sqlite:///{state}/jupyterhub.sqlite"
    c.JupyterHub.cookie_secret_file = f"{state}/jupyterhub_cookie_secret"
    c.ConfigurableHTTPProxy.pid_file = f"{state}/jupyterhub-proxy.pid"
# Learners' servers end with the hub (a class is one sitting); their notebooks stay.
c.JupyterHub.cleanup_servers = True

# Who the learners are.
if os.environ.get("PLACELAB_HUB_USERS", "system") == "dummy":
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = os.environ.get("PLACELAB_HUB_PASSWORD", "placelab")
    c.Authenticator.allow_all = True
    c.JupyterHub.spawner_class = "simple"
    homes = Path(os.environ.get("PLACELAB_HUB_HOMES", "/tmp/placelab-hub-homes"))
    c.SimpleLocalProcessSpawner.home_dir_template = str(homes / "{username}")
else:
    c.JupyterHub.spawner_class = "localprocess"
    c.LocalProcessSpawner.create_system_users = False
    c.Authenticator.allow_all = True

# What every learner's server gets: JupyterLab on the first tutorial, the placelab kernel and
# its engine, and the toolchain (cargo compiles each cell). A course with GPUs leaves
# PLACELAB_SIMULATE_CUDA out.
c.Spawner.default_url = "/lab/tree/placelab-notebooks/01-devices-and-tensors.ipynb"
passed = ["PLACELAB_ENGINE", "PLACELAB_SIMULATE_CUDA", "CARGO_HOME", "RUSTUP_HOME", "PATH"]
c.Spawner.environment = {k: os.environ[k] for k in passed if k in os.environ}
# Idle kernels end after 30 minutes inside a running server (their notebooks say so).
c.Spawner.args = [
    "--MappingKernelManager.cull_idle_timeout=1800",
    "--MappingKernelManager.cull_interval=300",
]
if c.JupyterHub.spawner_class == "simple" and os.geteuid() == 0:
    # Dummy learners run as the hub's user, and a container's user is often root.
    c.Spawner.args.append("--allow-root")
# Two start-ups at once on a small machine take a while: wait up to five minutes.
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 300


def copy_notebooks(spawner):
    """Gives a learner their own copy of the notebooks, once: what they changed is kept."""
    if c.JupyterHub.spawner_class == "simple":
        home = Path(spawner.home_dir_template.format(username=spawner.user.name))
        home.mkdir(parents=True, exist_ok=True)
    else:
        import pwd

        entry = pwd.getpwnam(spawner.user.name)
        home = Path(entry.pw_dir)
    dest = home / "placelab-notebooks"
    if dest.exists():
        return
    shutil.copytree(notebooks, dest)
    if c.JupyterHub.spawner_class != "simple":
        for path in [dest, *dest.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)


c.Spawner.pre_spawn_hook = copy_notebooks

# Servers idle for PLACELAB_HUB_CULL minutes are stopped (jupyterhub-idle-culler).
services, roles = [], []
try:
    import jupyterhub_idle_culler  # noqa: F401

    cull = int(os.environ.get("PLACELAB_HUB_CULL", "60")) * 60
    services.append(
        {
            "name": "idle-culler",
            "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={cull}"],
        }
    )
    roles.append(
        {
            "name": "idle-culler",
            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
            "services": ["idle-culler"],
        }
    )
except ImportError:
    pass
token = os.environ.get("PLACELAB_HUB_TOKEN")
if token:
    services.append({"name": "course-admin", "api_token": token})
    roles.append({"name": "course-admin", "scopes": ["admin-ui", "admin:users", "admin:servers", "tokens", "access:servers"], "services": ["course-admin"]})
c.JupyterHub.services = services
c.JupyterHub.load_roles = roles
