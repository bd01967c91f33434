"""gpu-goodput-exporter: is this GPU doing useful work?"""

__version__ = "0.1.0"
