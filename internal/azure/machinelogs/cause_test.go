package machinelogs

import "testing"

func TestCause(t *testing.T) {
	cases := map[string]struct{ log, want string }{
		"kubeadm's phase error wins over the lines after it": {
			log: "[preflight] Running pre-flight checks\n" +
				"error execution phase preflight: couldn't validate the identity of the API Server: Get \"https://10.0.0.4:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s\": dial tcp 10.0.0.4:6443: i/o timeout\n" +
				"To see the stack trace of this error execute with --v=5 or higher\n" +
				"2026-11-25 10:00:00,000 - cc_scripts_user.py[WARNING]: Failed to run module scripts-user (scripts in /var/lib/cloud/instance/scripts)\n",
			want: "error execution phase preflight: couldn't validate the identity of the API Server: Get \"https://10.0.0.4:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s\": dial tcp 10.0.0.4:6443: i/o timeout",
		},
		"cloud-init's module failure": {
			log: "+ false\n2026-11-25 10:00:00,000 - subp.py[DEBUG]: Unexpected error while running command.\n" +
				"2026-11-25 10:00:00,001 - cc_scripts_user.py[WARNING]: Failed to run module scripts-user (scripts in /var/lib/cloud/instance/scripts)\n",
			want: "Failed to run module scripts-user (scripts in /var/lib/cloud/instance/scripts)",
		},
		"cloudbase-init's last ERROR line": {
			log: "2026-11-25 10:00:00.000 1234 INFO cloudbaseinit.init [-] Executing plugin 'UserDataPlugin'\n" +
				"2026-11-25 10:00:01.000 1234 ERROR cloudbaseinit.init [-] plugin 'UserDataPlugin' failed with error 'boom'\n" +
				"2026-11-25 10:00:01.001 1234 INFO cloudbaseinit.init [-] Plugins execution done\n",
			want: "ERROR cloudbaseinit.init [-] plugin 'UserDataPlugin' failed with error 'boom'",
		},
		"cloud-init's write_files, not what kubeadm says after it": {
			log: "2026-11-25 10:00:00,000 - log_util.py[WARNING]: Running module write_files (<module 'cloudinit.config.cc_write_files'>) failed\n" +
				"unable to read config from \"/run/kubeadm/kubeadm-join-config.yaml\" : open /run/kubeadm/kubeadm-join-config.yaml: no such file or directory\n" +
				"2026-11-25 10:00:01,000 - log_util.py[WARNING]: Running module scripts_user (<module 'cloudinit.config.cc_scripts_user'>) failed\n",
			want: "Running module write_files (<module 'cloudinit.config.cc_write_files'>) failed",
		},
		"nothing wrong said": {log: "[preflight] Running pre-flight checks\n", want: ""},
	}
	for name, c := range cases {
		if got := Cause(c.log); got != c.want {
			t.Errorf("%s: Cause = %q, want %q", name, got, c.want)
		}
	}
}

func TestKubeletCause(t *testing.T) {
	log := "I1125 02:42:29.000000 1412 server.go:500] \"Kubelet version\" kubeletVersion=\"v1.36.3\"\n" +
		`E1125 02:42:29.500000 1412 run.go:72] "command failed" err="failed to parse kubelet flag: unknown flag: --azure-container-registry-config"` + "\n"
	if got, want := KubeletCause(log), "failed to parse kubelet flag: unknown flag: --azure-container-registry-config"; got != want {
		t.Errorf("KubeletCause = %q, want %q", got, want)
	}
	if got := KubeletCause("I1125 all is well\n"); got != "" {
		t.Errorf("KubeletCause of a healthy log = %q", got)
	}
	if !KubeletGaveUp("error execution phase kubelet-start: The HTTP call equal to 'curl -sSL http://127.0.0.1:10248/healthz' returned error") || KubeletGaveUp("error execution phase preflight: x") {
		t.Error("KubeletGaveUp tells kubelet-start from other phases wrongly")
	}
}
