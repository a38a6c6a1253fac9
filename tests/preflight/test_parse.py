"""The preflight parsers on real tool output (sources in tests/fixtures/preflight/README.md)."""

import math

from provisioner.preflight import parse

# github Ascend/mind-cluster @ 6c254192 docs/zh/faultdiag/user_guide.md
ECC = """NPU ID                                   : 1
Chip Count                               : 1

DDR Single Bit Error Count               : 0
DDR Double Bit Error Count               : 0
DDR Single Bit Aggregate Total Err Cnt   : 0
DDR Double Bit Aggregate Total Err Cnt   : 0
DDR Single Bit Isolated Pages Count      : 0
DDR Double Bit Isolated Pages Count      : 0
HBM Single Bit Error Count               : 0
HBM Double Bit Error Count               : 0
HBM Single Bit Aggregate Total Err Cnt   : 0
HBM Double Bit Aggregate Total Err Cnt   : 0
HBM Single Bit Isolated Pages Count      : 0
HBM Double Bit Isolated Pages Count      : 0
Chip ID                                  : 0
"""
HEALTH = """ Health Status                  : OK
 Error Code                     : NA
 Error Information              : NA
"""
TLS = ("dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), tls alarm time"
       " threshold[60]days")
# github ArthurChiao/arthurchiao.github.io @ b25a336a _posts/2023-09-16-gpu-advanced-notes-2-zh.md
COMMON = """        NPU ID                         : 1
        Chip Count                     : 1

        Chip ID                        : 0
        Memory Usage Rate(%)           : 0
        HBM Usage Rate(%)              : 4
        Aicore Usage Rate(%)           : 0
        Aicore Freq(MHZ)               : 1800
        Aicore curFreq(MHZ)            : 800
        Aicore Count                   : 24
        Temperature(C)                 : 46
        NPU Real-time Power(W)         : 93.4

        Chip Name                      : mcu
        Temperature(C)                 : 38
"""
USAGES = """        NPU ID                         : 0
        Chip Count                     : 1

        DDR Capacity(MB)               : 0
        HBM Capacity(MB)               : 65536
        HBM Usage Rate(%)              : 4
        Aicore Usage Rate(%)           : 0
        Chip ID                        : 0
"""
CONF = """address_0=29.1.137.205
netmask_0=255.255.0.0
netdetect_0=29.1.0.1
gateway_0=29.1.0.1
send_arp_status_0=1
"""
PING = """device 3 PING 29.1.137.205
recv seq=0,time=1.418000ms
recv seq=1,time=0.034000ms
recv seq=2,time=0.040000ms
3 packets transmitted, 3 received, 0.00% packet loss
"""


def test_ecc_health_and_usages():
    assert parse.parse_ecc(ECC) == {0: {k: 0 for k in parse._ECC_KEYS.values()}}
    bad = ECC.replace("HBM Double Bit Error Count               : 0", "HBM Double Bit Error Count               : 3")
    assert parse.parse_ecc(bad)[0]["hbm_double"] == 3
    assert parse.parse_health(HEALTH) == {"status": "OK", "error_code": None, "error_info": None}
    assert parse.parse_usages(USAGES) == {0: {"hbm_mb": 65536.0, "hbm_pct": 4.0}}


def test_temperature_and_power_skip_the_mcu_block():
    assert parse.parse_temp(COMMON) == {0: 46.0}
    assert parse.parse_power(COMMON) == {0: 93.4}


def test_hccn_tool_outputs():
    assert parse.parse_ip("ipaddr:29.1.112.213\nnetmask:255.255.0.0\n") == {"address": "29.1.112.213",
                                                                          "netmask": "255.255.0.0"}
    assert parse.parse_link("link status: UP") == "UP" and parse.parse_link("link status: DOWN") == "DOWN"
    assert parse.parse_net_health("net health status: Init") == "Init"
    assert parse.parse_tls(TLS) == 0 and parse.parse_tls(TLS.replace("switch[0]", "switch[1]")) == 1
    assert parse.parse_ping(PING) == {"sent": 3, "received": 3}
    assert parse.parse_hccn_conf(CONF) == {0: {"address": "29.1.137.205", "netmask": "255.255.0.0",
                                               "netdetect": "29.1.0.1", "gateway": "29.1.0.1",
                                               "send_arp_status": "1"}}


def test_chrony_offset_sign():
    assert parse.parse_chrony("System time     : 0.000006523 seconds slow of NTP time") == -0.000006523
    assert parse.parse_chrony("System time     : 2.5 seconds fast of NTP time") == 2.5
    assert parse.parse_chrony("nothing") is None


def test_nan_and_na_are_not_measurements():
    assert parse.parse_temp("Temperature(C) : nan\nChip ID : 0") == {}
    assert parse.parse_power("NPU Real-time Power(W) : inf") == {}
    assert parse.parse_ecc("HBM Double Bit Error Count : NA") == {}
    assert not any(math.isnan(v) for v in parse.parse_temp("Temperature(C) : 41").values())


def test_collection_file_splits_commands_and_drops_other_output():
    text = "\n".join([
        "/usr/local/bin/npu-smi info -i 0 -c 0 -t health", HEALTH,
        "cat /usr/local/Ascend/driver/version.info", "Version=24.1.rc1",
        "/usr/local/Ascend/driver/tools/hccn_tool -i 0 -tls -g | grep switch", TLS,
        "/usr/local/Ascend/driver/tools/hccn_tool -i 3 -ping -g address 29.1.137.205", PING,
        "chronyc tracking", "System time     : 0.5 seconds fast of NTP time",
    ])
    got = {(c["tool"], c["npu"], c["chip"], c["what"]): out for c, out in parse.split_collected(text)}
    assert set(got) == {("npu-smi", 0, 0, "health"), ("hccn_tool", 0, None, "tls"),
                        ("hccn_tool", 3, None, "ping:29.1.137.205"), ("chronyc", None, None, "tracking")}
    assert "Version=" not in got[("npu-smi", 0, 0, "health")]
    assert parse.parse_health(got[("npu-smi", 0, 0, "health")])["status"] == "OK"
