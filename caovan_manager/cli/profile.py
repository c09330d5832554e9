"""`caovan profile`: registers the launch-profile command, which lives with the plugin (caovan_kernels.profile)."""

from caovan_kernels.profile.cli import profile_command

from .app import app

app.command("profile")(profile_command)
