/*
 * cmd_devices.c: `cltrain devices`: a table (or JSON) of every OpenCL device,
 * or of those a spec selects.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static void help(FILE *to) {
  fprintf(to, "usage: cltrain devices [--devices SPEC] [--json]\n"
              "\n"
              "  -d, --devices SPEC   list only the devices SPEC selects (default: all;\n"
              "                       CLT_DEVICES when set). SPEC is a comma-separated list of\n"
              "                       all, gpu, cpu, accelerator, P:D, N, a platform/vendor/name\n"
              "                       fragment (pocl, rusticl, nvidia, amd, intel), or TERM:N\n"
              "      --json           print JSON instead of a table\n"
              "  -h, --help           this text\n");
}

static const char *yesno(int b) { return b ? "yes" : "no"; }

static void print_table(const clt_devices *devs) {
  printf("%-5s %-4s %-28s %-12s %-4s %5s %6s %9s %9s %7s %5s %4s %4s %s\n", "#", "P:D", "device", "platform", "type",
         "CUs", "MHz", "memory", "max-alloc", "local", "wg", "fp16", "fp64", "OpenCL C");
  for (int i = 0; i < clt_devices_count(devs); i++) {
    const clt_device_info *d = clt_devices_info(devs, i);
    char pd[16];
    snprintf(pd, sizeof pd, "%d:%d", d->platform_index, d->device_index);
    printf("%-5d %-4s %-28.28s %-12.12s %-4s %5u %6u %7.1fGi %7.1fGi %5lluKi %5zu %4s %4s %d.%d\n", d->index, pd,
           d->name, d->platform_name, clt_device_type_name(d->type), d->compute_units, d->clock_mhz,
           d->global_mem_bytes / 1073741824.0, d->max_alloc_bytes / 1073741824.0,
           (unsigned long long)(d->local_mem_bytes / 1024), d->max_work_group_size, yesno(d->fp16), yesno(d->fp64),
           d->opencl_c_major, d->opencl_c_minor);
  }
  for (int i = 0; i < clt_devices_count(devs); i++) {
    const clt_device_info *d = clt_devices_info(devs, i);
    printf("\n[%d] %s\n    vendor %s; platform %s (%s)\n    driver %s; %s; unified memory %s%s%s\n", d->index,
           d->name, d->vendor, d->platform_name, d->platform_vendor, d->driver_version, d->device_version,
           yesno(d->unified_memory), d->pci_bus_id[0] ? "; PCI " : "", d->pci_bus_id);
  }
}

static json_t *device_json(const clt_device_info *d) {
  return json_pack("{s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:b, s:b, "
                   "s:b, s:s?}",
                   "index", d->index, "platform_index", d->platform_index, "device_index", d->device_index, "name",
                   d->name, "vendor", d->vendor, "platform", d->platform_name, "platform_vendor", d->platform_vendor,
                   "type", clt_device_type_name(d->type), "driver_version", d->driver_version, "device_version",
                   d->device_version, "opencl_c_version", d->opencl_c_version, "compute_units", (int)d->compute_units,
                   "clock_mhz", (int)d->clock_mhz, "global_mem_bytes", (json_int_t)d->global_mem_bytes,
                   "max_alloc_bytes", (json_int_t)d->max_alloc_bytes, "local_mem_bytes",
                   (json_int_t)d->local_mem_bytes, "max_work_group_size", (json_int_t)d->max_work_group_size, "fp16",
                   d->fp16, "fp64", d->fp64, "unified_memory", d->unified_memory, "pci_bus_id",
                   d->pci_bus_id[0] ? d->pci_bus_id : NULL);
}

int cmd_devices(int argc, char **argv) {
  static const struct option opts[] = {
      {"devices", required_argument, 0, 'd'}, {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0}};
  const char *spec = NULL;
  int json = 0, c;
  while ((c = cli_getopt(argc, argv, "d:h", opts, "devices")) != -1) {
    switch (c) {
    case 'd': spec = optarg; break;
    case 'j': json = 1; break;
    case 'h': help(stdout); return CLI_EXIT_OK;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "cltrain: devices: unexpected argument '%s'\n", argv[optind]);
    return CLI_EXIT_USAGE;
  }

  clt_devices *all = NULL, *sel = NULL;
  int ec = cli_select_devices(spec, &all, &sel);
  if (ec == CLI_EXIT_OK) {
    if (json) {
      json_t *arr = json_array();
      for (int i = 0; i < clt_devices_count(sel); i++) json_array_append_new(arr, device_json(clt_devices_info(sel, i)));
      json_t *root = json_pack("{s:s, s:o}", "cltrain_version", clt_version(), "devices", arr);
      char *text = json_dumps(root, JSON_INDENT(2));
      if (text) puts(text);
      free(text);
      json_decref(root);
    } else {
      print_table(sel);
    }
  }
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  return ec;
}
