"""Drives the Azure SDK for Python against a running `winkube emulator`.

Run by hand with Debian's python3-azure (the Python packages reachable here;
the newest from PyPI are not): the same steps as js-tryout.mjs.

  REQUESTS_CA_BUNDLE=$AZURE_CA_FILE AZURE_RESOURCE_MANAGER_ENDPOINT=... AZURE_AUTHORITY_HOST=... \
    AZURE_TENANT_ID=... AZURE_CLIENT_ID=... AZURE_CLIENT_SECRET=... /usr/bin/python3 hack/clientversions/py-tryout.py
"""
import os
import sys

from azure.identity import ClientSecretCredential
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.resource import ResourceManagementClient

env = os.environ
arm = env["AZURE_RESOURCE_MANAGER_ENDPOINT"]
sub = env.get("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-0000000000aa")
# azure-identity 1.13.0b2 names the switch instance_discovery; later
# releases call it disable_instance_discovery.
cred = ClientSecretCredential(env["AZURE_TENANT_ID"], env["AZURE_CLIENT_ID"], env["AZURE_CLIENT_SECRET"],
                              authority=env["AZURE_AUTHORITY_HOST"], instance_discovery=False)
kw = {"base_url": arm, "credential_scopes": [arm + "/.default"]}
res = ResourceManagementClient(cred, sub, **kw)
net = NetworkManagementClient(cred, sub, **kw)
cmp = ComputeManagementClient(cred, sub, **kw)
loc, rg = "westeurope", "py-tryout"
steps = []


def step(name, fn):
    try:
        out = fn()
        steps.append("ok   " + name)
        return out
    except Exception as e:  # pylint: disable=broad-except
        steps.append("FAIL %s: %s" % (name, str(e).splitlines()[0]))
        return None


step("resource_groups.create_or_update", lambda: res.resource_groups.create_or_update(rg, {"location": loc}))
vnet = step("virtual_networks.begin_create_or_update", lambda: net.virtual_networks.begin_create_or_update(rg, "vnet", {
    "location": loc, "address_space": {"address_prefixes": ["10.0.0.0/16"]},
    "subnets": [{"name": "nodes", "address_prefix": "10.0.1.0/24"}]}).result())
subnet = vnet.subnets[0].id if vnet else ""
nic = step("network_interfaces.begin_create_or_update", lambda: net.network_interfaces.begin_create_or_update(rg, "nic", {
    "location": loc, "ip_configurations": [{"name": "ip", "subnet": {"id": subnet}}]}).result())
image = {"publisher": "cncf-upstream", "offer": "capi", "sku": "ubuntu-2204-gen1", "version": "latest"}
ssh = {"public_keys": [{"path": "/home/capi/.ssh/authorized_keys", "key_data": "ssh-ed25519 AAAA tryout"}]}
step("virtual_machines.begin_create_or_update", lambda: cmp.virtual_machines.begin_create_or_update(rg, "vm", {
    "location": loc, "hardware_profile": {"vm_size": "Standard_D2s_v3"},
    "storage_profile": {"image_reference": image, "os_disk": {"create_option": "FromImage"}},
    "os_profile": {"computer_name": "vm", "admin_username": "capi",
                   "linux_configuration": {"disable_password_authentication": True, "ssh": ssh}},
    "network_profile": {"network_interfaces": [{"id": nic.id if nic else ""}]}}).result())
step("virtual_machines.instance_view", lambda: cmp.virtual_machines.instance_view(rg, "vm"))
step("virtual_machine_scale_sets.begin_create_or_update", lambda: cmp.virtual_machine_scale_sets.begin_create_or_update(rg, "ss", {
    "location": loc, "sku": {"name": "Standard_D2s_v3", "capacity": 2}, "upgrade_policy": {"mode": "Manual"},
    "virtual_machine_profile": {
        "storage_profile": {"image_reference": image, "os_disk": {"create_option": "FromImage"}},
        "os_profile": {"computer_name_prefix": "ss", "admin_username": "capi",
                       "linux_configuration": {"disable_password_authentication": True, "ssh": ssh}},
        "network_profile": {"network_interface_configurations": [{"name": "nic", "primary": True,
                                                                  "ip_configurations": [{"name": "ip", "subnet": {"id": subnet}}]}]}}}).result())
step("virtual_machine_scale_sets.get_instance_view", lambda: cmp.virtual_machine_scale_sets.get_instance_view(rg, "ss"))
ids = step("virtual_machine_scale_set_vms.list", lambda: [v.instance_id for v in cmp.virtual_machine_scale_set_vms.list(rg, "ss")]) or ["0"]
step("virtual_machine_scale_sets.begin_delete_instances", lambda: cmp.virtual_machine_scale_sets.begin_delete_instances(rg, "ss", {"instance_ids": ids[-1:]}).result())
step("virtual_machine_scale_sets.begin_delete", lambda: cmp.virtual_machine_scale_sets.begin_delete(rg, "ss").result())
step("virtual_machines.begin_delete", lambda: cmp.virtual_machines.begin_delete(rg, "vm").result())
step("resource_groups.begin_delete", lambda: res.resource_groups.begin_delete(rg).result())
print("\n".join(steps))
failed = sum(1 for s in steps if s.startswith("FAIL"))
print("%d passed, %d failed" % (len(steps) - failed, failed))
sys.exit(1 if failed else 0)
