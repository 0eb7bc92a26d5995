"""The pytest plugin's defaults, shared by the plugin (:mod:`.pytest_plugin`) and the runs it
makes (:mod:`.pytest_run`); plain values, so loading the plugin stays free."""

DEFAULT_LEVELS = "safety,order,robustness"
DEFAULT_MACHINES = "pool,requests"
DEFAULT_SETTINGS = "dev"
#: The settings profiles (``pytest_run.SETTINGS`` holds their sizes).
SETTINGS_NAMES = ("ci", "dev", "deep")
