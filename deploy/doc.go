// Package deploy holds the deployment files (Dockerfile, Kubernetes
// manifests, a systemd unit with its sysctl drop-in, an HAProxy config) and
// the test that keeps them consistent with the gateway's settings.
package deploy
