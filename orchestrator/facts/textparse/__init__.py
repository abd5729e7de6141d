"""Text evidence: parse what nvidia-smi and lspci print, and turn it into normalized facts.

Pure functions; the only I/O is `read_path`/`import_files` reading the files they are given.
"""

from orchestrator.facts.textparse.bench import (
    BwLatency,
    NcclRun,
    NvBandwidth,
    parse_nccl_tests,
    parse_nvbandwidth,
    parse_p2p_bwlat,
)
from orchestrator.facts.textparse.common import MAX_BYTES, Note, TextParseError, decode_input, read_path
from orchestrator.facts.textparse.csvquery import parse_smi_csv
from orchestrator.facts.textparse.detect import KINDS, PARSED_KINDS, detect_kind
from orchestrator.facts.textparse.facts import Parsed, to_facts
from orchestrator.facts.textparse.importer import (
    RAW_COMMANDS,
    ImportedFile,
    ImportedHost,
    facts_from_raw_outputs,
    import_files,
    import_fleet,
    import_texts,
    parse_text,
    summary_lines,
)
from orchestrator.facts.textparse.lspci import LspciTree, LspciVerbose, parse_lspci_tree, parse_lspci_verbose
from orchestrator.facts.textparse.nvlink import NvlinkReport, parse_nvlink
from orchestrator.facts.textparse.smi import SmiList, SmiQuery, parse_smi_list, parse_smi_query, parse_smi_xml
from orchestrator.facts.textparse.topo import (
    CpuAffinity,
    P2PMatrix,
    TopoMatrix,
    parse_topo_cpu,
    parse_topo_matrix,
    parse_topo_p2p,
)

__all__ = [
    "KINDS",
    "MAX_BYTES",
    "PARSED_KINDS",
    "RAW_COMMANDS",
    "BwLatency",
    "CpuAffinity",
    "ImportedFile",
    "ImportedHost",
    "LspciTree",
    "LspciVerbose",
    "NcclRun",
    "Note",
    "NvBandwidth",
    "NvlinkReport",
    "P2PMatrix",
    "Parsed",
    "SmiList",
    "SmiQuery",
    "TextParseError",
    "TopoMatrix",
    "decode_input",
    "detect_kind",
    "facts_from_raw_outputs",
    "import_files",
    "import_fleet",
    "import_texts",
    "parse_lspci_tree",
    "parse_lspci_verbose",
    "parse_nccl_tests",
    "parse_nvbandwidth",
    "parse_nvlink",
    "parse_p2p_bwlat",
    "parse_smi_csv",
    "parse_smi_list",
    "parse_smi_query",
    "parse_smi_xml",
    "parse_text",
    "parse_topo_cpu",
    "parse_topo_matrix",
    "parse_topo_p2p",
    "read_path",
    "summary_lines",
    "to_facts",
]
