"""One finding as the scan reports it (the JSON object strata scan reads)."""


def finding(rule, file, start, end, api, category=None, tip=None, reason=None, severity=None):
    return {
        "file": file, "start_line": start, "end_line": end, "api": api,
        "category": category or rule.category, "severity": severity or rule.severity,
        "reason": reason or rule.reason, "tip": tip or rule.tip, "rule_set": rule.rule_set,
    }
