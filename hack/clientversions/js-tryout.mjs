// Drives the newest Azure SDK for JavaScript packages against a running
// `winkube emulator`, as a user of them would: sign in with the service
// principal it prints, then create and read what a cluster needs. Run it by
// hand (CI has no npm; emulator/arm/testdata/clients holds the api-versions
// these packages send, which the Go tests replay):
//
//   npm install @azure/identity @azure/arm-resources @azure/arm-network @azure/arm-compute
//   NODE_EXTRA_CA_CERTS=$AZURE_CA_FILE AZURE_RESOURCE_MANAGER_ENDPOINT=... AZURE_AUTHORITY_HOST=... \
//     AZURE_TENANT_ID=... AZURE_CLIENT_ID=... AZURE_CLIENT_SECRET=... node hack/clientversions/js-tryout.mjs
import { ClientSecretCredential } from "@azure/identity";
import { ResourceManagementClient } from "@azure/arm-resources";
import { NetworkManagementClient } from "@azure/arm-network";
import { ComputeManagementClient } from "@azure/arm-compute";

const env = process.env;
const arm = env.AZURE_RESOURCE_MANAGER_ENDPOINT;
const sub = env.AZURE_SUBSCRIPTION_ID || "00000000-0000-0000-0000-0000000000aa";
const cred = new ClientSecretCredential(env.AZURE_TENANT_ID, env.AZURE_CLIENT_ID, env.AZURE_CLIENT_SECRET, {
  authorityHost: env.AZURE_AUTHORITY_HOST,
  disableInstanceDiscovery: true,
});
const opts = { endpoint: arm, credentials: { scopes: [arm + "/.default"] } };
const res = new ResourceManagementClient(cred, sub, opts);
const net = new NetworkManagementClient(cred, sub, opts);
const cmp = new ComputeManagementClient(cred, sub, opts);

const loc = "westeurope";
const rg = "js-tryout";
const steps = [];
async function step(name, fn) {
  try {
    const out = await fn();
    steps.push(`ok   ${name}`);
    return out;
  } catch (e) {
    steps.push(`FAIL ${name}: ${e.statusCode ?? ""} ${e.code ?? ""} ${e.message}`);
    return undefined;
  }
}

await step("resourceGroups.createOrUpdate", () => res.resourceGroups.createOrUpdate(rg, { location: loc }));
await step("resourceGroups.get", () => res.resourceGroups.get(rg));
const vnet = await step("virtualNetworks.createOrUpdate", () => net.virtualNetworks.createOrUpdate(rg, "vnet", {
  location: loc, addressSpace: { addressPrefixes: ["10.0.0.0/16"] },
  subnets: [{ name: "nodes", addressPrefix: "10.0.1.0/24" }],
}));
const subnetId = vnet?.subnets?.[0]?.id ?? `/subscriptions/${sub}/resourceGroups/${rg}/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes`;
const nic = await step("networkInterfaces.createOrUpdate", () => net.networkInterfaces.createOrUpdate(rg, "nic", {
  location: loc, ipConfigurations: [{ name: "ip", subnet: { id: subnetId } }],
}));
const image = { publisher: "cncf-upstream", offer: "capi", sku: "ubuntu-2204-gen1", version: "latest" };
const ssh = { publicKeys: [{ path: "/home/capi/.ssh/authorized_keys", keyData: "ssh-ed25519 AAAA tryout" }] };
await step("virtualMachines.createOrUpdate", () => cmp.virtualMachines.createOrUpdate(rg, "vm", {
  location: loc,
  hardwareProfile: { vmSize: "Standard_D2s_v3" },
  storageProfile: { imageReference: image, osDisk: { createOption: "FromImage" } },
  osProfile: { computerName: "vm", adminUsername: "capi", linuxConfiguration: { disablePasswordAuthentication: true, ssh } },
  networkProfile: { networkInterfaces: [{ id: nic?.id }] },
}));
await step("virtualMachines.instanceView", () => cmp.virtualMachines.instanceView(rg, "vm"));
await step("virtualMachineScaleSets.createOrUpdate", () => cmp.virtualMachineScaleSets.createOrUpdate(rg, "ss", {
  location: loc, sku: { name: "Standard_D2s_v3", capacity: 2 },
  upgradePolicy: { mode: "Manual" },
  virtualMachineProfile: {
    storageProfile: { imageReference: image, osDisk: { createOption: "FromImage" } },
    osProfile: { computerNamePrefix: "ss", adminUsername: "capi", linuxConfiguration: { disablePasswordAuthentication: true, ssh } },
    networkProfile: { networkInterfaceConfigurations: [{ name: "nic", primary: true, ipConfigurations: [{ name: "ip", subnet: { id: subnetId } }] }] },
  },
}));
await step("virtualMachineScaleSets.getInstanceView", () => cmp.virtualMachineScaleSets.getInstanceView(rg, "ss"));
const ids = [];
await step("virtualMachineScaleSetVMs.list", async () => { for await (const v of cmp.virtualMachineScaleSetVMs.list(rg, "ss")) ids.push(v.instanceId); });
await step("virtualMachineScaleSets.deleteInstances", () => cmp.virtualMachineScaleSets.deleteInstances(rg, "ss", { instanceIds: ids.slice(-1) }));
await step("virtualMachineScaleSets.delete", () => cmp.virtualMachineScaleSets.delete(rg, "ss"));
await step("virtualMachines.delete", () => cmp.virtualMachines.delete(rg, "vm"));
await step("resourceGroups.delete", () => res.resourceGroups.delete(rg));
console.log(steps.join("\n"));
const failed = steps.filter((s) => s.startsWith("FAIL")).length;
console.log(`${steps.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
