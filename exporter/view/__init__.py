"""What a person sees: one row per GPU, built once from the exposition and shown as a
terminal table (``gpu-goodput-exporter top``) and as the landing page at ``/``."""
