"""The metrics plot (``aworld_core.plots``, shared with the other backends), under its former name."""

from aworld_core.plots import ACCURACY, PANELS, SFT_PANELS, plot_metrics

__all__ = ["ACCURACY", "PANELS", "SFT_PANELS", "plot_metrics"]
