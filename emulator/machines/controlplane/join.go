package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/winkube/winkube/emulator/machines/bootdata"
)

// sourceConfig is the kubeadm configuration this machine starts from: the
// custom data's for the first control plane; for a joining one, the
// cluster's own ClusterConfiguration, read from kubeadm-config with the
// bootstrap token as kubeadm join reads it.
func (cp *ControlPlane) sourceConfig(ctx context.Context) ([]byte, error) {
	if b, err := os.ReadFile(filepath.Join(cp.cfg.Dir, "kubeadm.yaml")); err == nil {
		return b, nil // booting again: the configuration of the first boot
	}
	if cp.cfg.Join == nil {
		f, ok := cp.cfg.Boot.File(bootdata.InitConfigPath)
		if !ok {
			return nil, fmt.Errorf("custom data writes no %s", bootdata.InitConfigPath)
		}
		return f.Content, nil
	}
	cs, err := kubernetes.NewForConfig(cp.cfg.Join.Token)
	if err != nil {
		return nil, err
	}
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's kubeadm-config: %w", err)
	}
	cc, ok := cm.Data["ClusterConfiguration"]
	if !ok {
		return nil, fmt.Errorf("kubeadm-config holds no ClusterConfiguration")
	}
	init := fmt.Sprintf("apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: %s\n", cp.cfg.NodeName)
	return []byte(init + "---\n" + cc), nil
}

// addEtcdMember announces this machine to the cluster's etcd, as kubeadm
// join --control-plane does, and returns the --initial-cluster list for
// the new member. The existing members are found by their static pods'
// advertise-client-urls annotation, as kubeadm finds them.
func (cp *ControlPlane) addEtcdMember(ctx context.Context) (string, error) {
	kdir := filepath.Join(cp.Root, "etc/kubernetes")
	admin, err := clientcmd.BuildConfigFromFlags("", filepath.Join(kdir, "super-admin.conf"))
	if err != nil {
		return "", err
	}
	admin.Host = "https://" + cp.Endpoint
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return "", err
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=etcd,tier=control-plane"})
	if err != nil {
		return "", fmt.Errorf("finding the etcd members: %w", err)
	}
	var endpoints []string
	for _, p := range pods.Items {
		if u := p.Annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"]; u != "" {
			endpoints = append(endpoints, strings.Split(u, ",")...)
		}
	}
	if len(endpoints) == 0 {
		return "", fmt.Errorf("no etcd static pod advertises its client URL: the cluster's first control plane is not up")
	}
	pki := filepath.Join(kdir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "apiserver-etcd-client.crt"), filepath.Join(pki, "apiserver-etcd-client.key"))
	if err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "etcd", "ca.crt"))
	if err != nil {
		return "", err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	ec, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Context: ctx,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}})
	if err != nil {
		return "", fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	defer ec.Close()
	peer := "https://" + net.JoinHostPort(cp.cfg.Host.String(), "2380")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := ec.MemberList(cctx)
	if err != nil {
		return "", fmt.Errorf("listing etcd members: %w", err)
	}
	members := list.Members
	known := false
	for _, m := range members {
		for _, u := range m.PeerURLs {
			known = known || u == peer
		}
	}
	if !known {
		cp.cfg.progress("adding etcd member " + cp.cfg.NodeName)
		resp, err := ec.MemberAdd(cctx, []string{peer})
		if err != nil {
			return "", fmt.Errorf("adding etcd member %s: %w", peer, err)
		}
		members = resp.Members
	}
	var parts []string
	for _, m := range members {
		name := m.Name
		for _, u := range m.PeerURLs {
			if u == peer {
				name = cp.cfg.NodeName
			}
		}
		if name == "" || len(m.PeerURLs) == 0 {
			continue // another member still joining
		}
		parts = append(parts, name+"="+m.PeerURLs[0])
	}
	return strings.Join(parts, ","), nil
}
