package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretCache restricts a manager's cache of Secrets to those of a Cluster
// API cluster (labelled cluster.x-k8s.io/cluster-name), and ReadSecretsLive
// makes its client read Secrets from the API server, as Cluster API's own
// managers do (main.go: clusterSecretCacheSelector, DisableFor). Without
// them every Secret of the management cluster (service-account tokens, TLS
// keys, Helm releases) is listed, watched and held in memory, and an
// identity's Secret, which is nobody's cluster's, would be read from a
// cache that never holds it.
func SecretCache(opts cache.Options) cache.Options {
	req, err := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant requirement
	}
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	opts.ByObject[&corev1.Secret{}] = cache.ByObject{Label: labels.NewSelector().Add(*req)}
	return opts
}

// ReadSecretsLive is SecretCache's other half, for client.Options.
func ReadSecretsLive(opts client.Options) client.Options {
	if opts.Cache == nil {
		opts.Cache = &client.CacheOptions{}
	}
	opts.Cache.DisableFor = append(opts.Cache.DisableFor, &corev1.Secret{})
	return opts
}
