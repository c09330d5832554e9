"""`caovan doctor`: registers the doctor command, which lives with the plugin (caovan_kernels.doctor)."""

from caovan_kernels.doctor.cli import doctor_command

from .app import app

app.command("doctor")(doctor_command)
