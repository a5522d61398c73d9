#!/bin/sh
# Regenerates the Kubernetes manifests in this folder from the TrainingJob specs next to them;
# tests check that the committed files match this output and validate them against the schemas.
set -e
cd "$(dirname "$0")/../.."
qosched k8s manifests > examples/k8s/scheduler.k8s.yaml
qosched k8s job examples/k8s/cnn-cpu.yaml --resource cpu --namespace ml \
    --image ghcr.io/qosched/qosched:0.1.0 > examples/k8s/cnn-cpu.k8s.yaml
qosched k8s job examples/k8s/resnet-gpu.yaml --resource gpu --namespace ml \
    --image registry.example.com/resnet-train:1 --model resnet50 --batch-size 64 \
    --replicas 2 > examples/k8s/resnet-gpu.k8s.yaml
