"""One canary secret per token family redaction covers, each in the shape a paste shows it.

`CANARIES` maps a family to (the text as pasted, the secret part that must never come out).
The values are made up, with the shape and length of the real ones (gitleaks' rules), so each
test can assert the secret is absent wherever inferbot writes: a reply, `--json`, a database
row, a spool file, a log line, `check` output.
"""

from __future__ import annotations

_B64 = "Zq8Xw2Vr5Tn7Ym3Lk9Jh4Gf6Ds1Ap0Ou"  # 32 mixed characters

CANARIES: dict[str, tuple[str, str]] = {
    "slack-bot": ("SLACK token xoxb-4614724432022-5152386766518-O5WzjWGLG0wcCm2WPrjEmnys",
                  "O5WzjWGLG0wcCm2WPrjEmnys"),
    "slack-user": ("xoxp-41684372915-1320496754-45609968301-e708ba56e1517a99f6b5fb07349476ef",
                   "e708ba56e1517a99f6b5fb07349476ef"),
    "slack-workspace": ("legacy xoxa-2-511111111-31111111111-3111111111111-e039d02840a0b9379c",
                        "e039d02840a0b9379c"),
    "slack-client": ("cookie d= xoxc-5121234567-5121234568-6011234567890-" + _B64 + "a1b2",
                     _B64 + "a1b2"),
    "slack-config": ("refresh xoxe-1-My0xLTMxNzcwMjQ0MTcxMy01MTU4MTUyNjkxNzE0LTUxODE4NDI0MDY3",
                     "My0xLTMxNzcwMjQ0MTcxMy01MTU4MTUyNjkxNzE0LTUxODE4NDI0MDY3"),
    "slack-app": ("app xapp-1-A052FGTS2DL-5171572773297-610b6a11f4b7eb819e87b767d80e6575a363",
                  "610b6a11f4b7eb819e87b767d80e6575a363"),
    "github-pat": ("git clone https://ghp_" + _B64 + "Ab12@github.com/o/r",
                   "ghp_" + _B64 + "Ab12"),
    "github-oauth": ("token gho_" + _B64 + "Cd34 expired", "gho_" + _B64 + "Cd34"),
    "github-app": ("GH_APP=ghs_" + _B64 + "Ef56 ghu_" + _B64 + "Gh78",
                   "ghu_" + _B64 + "Gh78"),
    "github-refresh": ("refresh ghr_" + _B64 + "Ij90", "ghr_" + _B64 + "Ij90"),
    "github-fine-grained": ("github_pat_11ABCDEFG0" + _B64 + "_" + _B64 + _B64[:17],
                            _B64 + "_" + _B64),
    "gitlab": ("CI uses glpat-Xk3vB7nQ9rT2wY5zL8mP for the registry", "glpat-Xk3vB7nQ9rT2wY5zL8mP"),
    "huggingface": ("huggingface_hub login with hf_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eFq",
                    "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eFq"),
    "openai": ("openai.AuthenticationError for sk-proj-" + _B64 + _B64 + ": 401", _B64 + _B64),
    "anthropic": ("x-api-key sk-ant-api03-" + _B64 + _B64 + _B64 + "-abcAA",
                  _B64 + _B64 + _B64),
    "aws-key-id": ("using AKIAZ7PQ2XR5LMN3TUVW on us-east-1", "AKIAZ7PQ2XR5LMN3TUVW"),
    "aws-unlabeled-secret": ("AKIAZ7PQ2XR5LMN3TUVW 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",
                             "lbqlNh3FW5/3AwnBoWsYIJam9w2Us4ZOH5Un8RyR"),
    "gcp-service-account": (
        '{"type": "service_account", "private_key_id": "3f1c9e0a7b2d4c6e8f0a1b3c5d7e9f0a2b4c6d8e",'
        ' "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC' + _B64
        + '\\n-----END PRIVATE KEY-----\\n"}', "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + _B64),
    "azure-storage": ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + _B64
                      + "+/Qw==;EndpointSuffix=core.windows.net", _B64 + "+/Qw=="),
    "azure-servicebus": ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root"
                         "ManageSharedAccessKey;SharedAccessKey=Nq" + _B64 + "=",
                         "Nq" + _B64 + "="),
    "jwt": ("Authorization failed for eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3"
            "ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
            "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
    "pem-private-key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + _B64
                        + "\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA" + _B64),
    "url-password": ("DATABASE_URL is postgresql://svc:Pw7-canary-Pw7@db:5432/x",
                     "Pw7-canary-Pw7"),
    "api-key-flag": ("vllm serve m --api-key Flag9canary9Flag --port 8000", "Flag9canary9Flag"),
    "hf-token-flag": ("python dl.py --hf-token=Tok3canary3Tok", "Tok3canary3Tok"),
}


def canary_text() -> str:
    """Every canary, one a line."""
    return "\n".join(text for text, _ in CANARIES.values())


def leaked(text: str) -> list[str]:
    """The families whose secret appears in `text`."""
    return [family for family, (_, secret) in CANARIES.items() if secret in text]
