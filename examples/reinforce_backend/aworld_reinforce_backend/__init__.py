"""An example aworld backend that trains a model: see README.md and docs/writing-a-plugin.md."""
