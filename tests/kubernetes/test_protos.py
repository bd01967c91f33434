"""The committed pod-resources stubs are what grpcio-tools makes of the proto."""

from __future__ import annotations

from exporter.sources.kubernetes import gen_protos, podresources_pb2, podresources_pb2_grpc


def test_committed_stubs_match_a_fresh_generation() -> None:
    assert gen_protos.stale_files() == [], "run: python -m exporter.sources.kubernetes.gen_protos"


def test_method_paths_are_the_kubelets() -> None:
    service = podresources_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name for m in service.methods} == {"List", "GetAllocatableResources"}
    assert hasattr(podresources_pb2_grpc, "PodResourcesListerStub")


def test_wire_numbers() -> None:
    fields = podresources_pb2.ContainerDevices.DESCRIPTOR.fields_by_name
    assert (fields["resource_name"].number, fields["device_ids"].number) == (1, 2)
    pod = podresources_pb2.PodResources.DESCRIPTOR.fields_by_name
    assert (pod["name"].number, pod["namespace"].number, pod["containers"].number) == (1, 2, 3)
