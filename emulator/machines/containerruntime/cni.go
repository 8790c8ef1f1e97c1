package containerruntime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// CNIAdd is what the CNI's ADD for a pod asks of the node, from the
// network configuration containerd loads: the first in confDir by name,
// as libcni orders them. Calico's plugin reads the node's name from the
// file calico-node writes once it has started, unless the configuration
// says the file is optional (cni-plugin/pkg/plugin/plugin.go, calico
// v3.30.7); its error is the plugin's.
func CNIAdd(node Node, confDir string) error {
	dir, err := node.Disk.HostPath(confDir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conflist", ".conf", ".json":
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no network config found in %s: cni plugin not initialized", confDir)
	}
	sort.Strings(names)
	data, err := os.ReadFile(filepath.Join(dir, names[0]))
	if err != nil {
		return err
	}
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return fmt.Errorf("failed to load CNI config %s: %v", names[0], err)
	}
	notFound := "no such file or directory"
	if node.OS == "windows" {
		notFound = "The system cannot find the file specified."
	}
	for i, p := range conf.Plugins {
		if p["type"] != "calico" {
			continue
		}
		if err := calicoNetConf(data, i); err != nil {
			return err
		}
		if optional, _ := p["nodename_file_optional"].(bool); optional {
			return nil
		}
		file, _ := p["nodename_file"].(string)
		if file == "" {
			file = "/var/lib/calico/nodename"
		}
		hp, err := node.Disk.HostPath(file)
		if err != nil {
			return err
		}
		if _, err := os.Stat(hp); err != nil {
			return fmt.Errorf("plugin type=\"calico\" failed (add): stat %s: %s: check that the calico/node container is running and has mounted /var/lib/calico/", file, notFound)
		}
	}
	return nil
}

// calicoNetConf decodes the calico plugin's entry as the plugin does at
// every ADD: libcni hands each plugin of a conflist its own entry on
// stdin, and the plugin unmarshals it into its NetConf, whose fields are
// typed (cni-plugin/pkg/types/types.go and pkg/plugin/plugin.go cmdAdd,
// calico v3.30.7, 74485ea4), so a quoted number such as "mtu": "1350"
// fails every pod's sandbox with the plugin's "failed to load netconf".
// The types below are those of the fields a configuration template sets.
func calicoNetConf(conflist []byte, i int) error {
	var raw struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &raw); err != nil || i >= len(raw.Plugins) {
		return err
	}
	// Named as the plugin's type, so that encoding/json's error reads as
	// the plugin's does.
	type NetConf struct {
		Type                 string `json:"type"`
		Mode                 string `json:"mode"`
		VXLANVNI             uint64 `json:"vxlan_vni"`
		MTU                  int    `json:"mtu"`
		NumQueues            int    `json:"num_queues"`
		Nodename             string `json:"nodename"`
		NodenameFile         string `json:"nodename_file"`
		NodenameFileOptional bool   `json:"nodename_file_optional"`
		DatastoreType        string `json:"datastore_type"`
		LogLevel             string `json:"log_level"`
		LogFilePath          string `json:"log_file_path"`
		LogFileMaxSize       int    `json:"log_file_max_size"`
		LogFileMaxAge        int    `json:"log_file_max_age"`
		LogFileMaxCount      int    `json:"log_file_max_count"`
		IPAM                 struct {
			Type      string   `json:"type"`
			IPv4Pools []string `json:"ipv4_pools,omitempty"`
		} `json:"ipam,omitempty"`
		Kubernetes struct {
			Kubeconfig string `json:"kubeconfig"`
		} `json:"kubernetes"`
		IncludeDefaultRoutes               bool `json:"include_default_routes,omitempty"`
		WindowsPodDeletionTimestampTimeout int  `json:"windows_pod_deletion_timestamp_timeout,omitempty"`
	}
	var conf NetConf
	if err := json.Unmarshal(raw.Plugins[i], &conf); err != nil {
		return fmt.Errorf("plugin type=\"calico\" failed (add): failed to load netconf: %v", err)
	}
	return nil
}
