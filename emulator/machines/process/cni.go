package process

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
	for _, p := range conf.Plugins {
		if p["type"] != "calico" {
			continue
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
