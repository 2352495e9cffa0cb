"""The matrix page: each library's level of conformance counts its MUSTs and the MAYs it has, and a FAIL's cell
links to its pcap."""
from conformance.clients.matrix import conformance_level, render_html, render_table


def _case(identifier, level, verdict, pcap=None):
    return {"id": identifier, "level": level, "verdict": verdict, "section": identifier.rsplit("-", 1)[0],
            "baseline": None, "why": "", "message": "", "pcap": pcap}


DOCUMENT = {"driver": "lib", "library": "lib 1.0", "differences": [], "cases": [
    _case("NSQC-HB-001", "MUST", "PASS"), _case("NSQC-PUB-002", "MUST", "FAIL", "reports/lib/pcap/NSQC-PUB-002.pcap"),
    _case("NSQC-PUB-003", "MAY", "UNSUPPORTED"), _case("NSQC-MSG-005", "MAY", "PASS"),
    _case("NSQC-CLS-001", "SHOULD", "NON-STRICT")]}


def test_level_counts_musts_and_the_mays_the_library_has():
    assert conformance_level(DOCUMENT) == {"MUST": (2, 3), "SHOULD": (0, 1)}
    assert "MUST 2/3, SHOULD 0/1" in render_table([DOCUMENT])


def test_a_fail_links_to_its_pcap():
    page = render_html([DOCUMENT])
    assert "href='lib/pcap/NSQC-PUB-002.pcap'" in page
    assert page.count(">pcap</a>") == 1
