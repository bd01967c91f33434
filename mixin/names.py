"""Every recorded series' name, spelled once: the rules record them under these names, the
alerts, the dashboards and the descriptions read them through these constants, so renaming a
rule is one edit and a typo is an ImportError rather than an empty panel.

Naming: goodput:<level>_<quantity>:<operation>, level = gpu | node | namespace | model | job
| cluster. The `rate5m`/`increase10m` suffixes stay whatever windows the configuration sets.
"""

from __future__ import annotations

# Per GPU (goodput.shard.gpu).
GPU_UTILIZATION = "goodput:gpu_utilization:ratio_rate5m"
GPU_PROFILED = "goodput:gpu_profiled:ratio_rate5m"
GPU_SM_ACTIVE = "goodput:gpu_sm_active_seconds:rate5m"
GPU_HOLLOW = "goodput:gpu_hollow_utilization:ratio_rate5m"
GPU_POWER = "goodput:gpu_power:watts_rate5m"
GPU_TOKENS = "goodput:gpu_tokens:rate5m"
GPU_MODEL_INFO = "goodput:gpu_model:info"
GPU_REGIME = "goodput:gpu_regime:ratio_rate5m"
GPU_TOKENS_PER_SM = "goodput:gpu_tokens_per_sm_second:ratio_rate5m"
GPU_THROTTLED = "goodput:gpu_throttled:ratio_rate5m"
GPU_POWER_BRAKE = "goodput:gpu_power_brake:ratio_rate5m"
GPU_XID = "goodput:gpu_xid_errors:increase10m"
GPU_ECC = "goodput:gpu_ecc_uncorrected_errors:increase10m"
# Holders of shared GPUs (pods or processes), one series per holder (for the fleet board).
GPU_HOLDER_KERNEL = "goodput:gpu_holder_kernel_time:ratio_rate5m"
GPU_HOLDER_UNPRODUCTIVE = "goodput:gpu_holder_busy_unproductive:max"

# Per node and scrape target (goodput.shard.node, goodput.shard.serving).
EXPORTER_NODE = "goodput:exporter_node:info"
REGIME_GPUS = "goodput:regime_gpus:sum"
JOB_GPU_WAITING = "goodput:job_gpu_waiting:ratio_rate5m"
NODE_JOB_GPU_SECONDS = "goodput:node_job_gpu_seconds:rate5m"
NODE_JOB_TOKENS = "goodput:node_job_tokens:rate5m"
MODEL_TTFT_BUCKET = "goodput:model_ttft_seconds_bucket:rate5m"

# Per node and namespace / model, pre-aggregated on every shard (goodput.shard.namespace): the
# global level sums these, a few series per node, rather than joining every GPU to its pods.
NODE_NS_UTILIZATION = "goodput:node_namespace_profiled_utilization:sum_rate5m"
NODE_NS_PROFILED_GPUS = "goodput:node_namespace_profiled_gpus:count"
NODE_NS_SM_ACTIVE = "goodput:node_namespace_sm_active_seconds:sum_rate5m"
NODE_NS_PROFILED = "goodput:node_namespace_profiled:sum_rate5m"
NODE_NS_POWER = "goodput:node_namespace_power:watts_rate5m"
NODE_NS_GPUS = "goodput:node_namespace_gpus:count"
NODE_MODEL_POWER = "goodput:node_model_power:watts_rate5m"
NODE_MODEL_GPUS = "goodput:node_model_gpus:count"

# Fleet-wide (goodput.global.fleet; the per-node sums of tokens and allocated-idle GPUs are
# recorded on the shards).
PRICE = "goodput:gpu_hour_price_dollars"
NAMESPACE_HOLLOW = "goodput:namespace_hollow_utilization:ratio_avg_rate5m"
NAMESPACE_TOKENS = "goodput:namespace_tokens:rate5m"
NAMESPACE_TOKENS_PER_JOULE = "goodput:namespace_tokens_per_joule:ratio_rate5m"
NAMESPACE_COST = "goodput:namespace_cost_per_million_tokens:dollars_rate5m"
NAMESPACE_ALLOCATED_IDLE = "goodput:namespace_allocated_idle_gpus:sum"
CLUSTER_REGIME_GPUS = "goodput:cluster_regime_gpus:sum"
MODEL_TOKENS = "goodput:model_tokens:rate5m"
MODEL_TOKENS_PER_JOULE = "goodput:model_tokens_per_joule:ratio_rate5m"
MODEL_COST = "goodput:model_cost_per_million_tokens:dollars_rate5m"
MODEL_TOKENS_PER_SM_MEDIAN = "goodput:model_tokens_per_sm_second:median_rate5m"
MODEL_GPUS = "goodput:model_gpus:count"

# Training jobs (goodput.global.job).
JOB_STRAGGLER = "goodput:job_straggler:gap_rate5m"
JOB_GPU_SECONDS = "goodput:job_gpu_seconds:rate5m"
JOB_WAITING_GPUS = "goodput:job_waiting_gpus:rate5m"
JOB_WAITING = "goodput:job_waiting:ratio_rate5m"
JOB_TOKENS_PER_WORKING = "goodput:job_tokens_per_working_gpu_second:ratio_rate5m"
