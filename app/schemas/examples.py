"""Request examples shown in /docs and /redoc: each one works as sent ("Try it out") against a
fresh tenant of a development server started with `scripts/run --fake-model`, after the step its
summary names, if any; a test sends every one of them (tests/api/test_openapi_contract.py)."""

from __future__ import annotations

from typing import Any

Examples = dict[str, dict[str, Any]]

_DICE_PARAMETERS = {
    "type": "object",
    "properties": {"d": {"type": "integer", "description": "Number of sides"}},
    "required": ["d"],
}

# Every function of the dictionary is seeded into each tenant, so a function tool cannot be
# created on a fresh tenant (its function name is taken): TOOL_UPDATE shows one instead.
TOOL_CREATE: Examples = {
    "external": {
        "summary": "An external tool: GET with a hidden context parameter",
        "value": {
            "tool_id": "weather-api",
            "type": "external",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "units": {"type": "string", "enum": ["metric", "imperial"]},
                    },
                    "required": ["city"],
                },
                "url": "https://api.example.com/weather",
                "method": "GET",
            },
            "context_parameters": [{"name": "user_id", "type": "string"}],
            "tags": ["weather"],
        },
    },
    "external_with_secret": {
        "summary": "An external tool: POST with a tenant secret in a header",
        "value": {
            "tool_id": "create-ticket",
            "type": "external",
            "function": {
                "name": "create_ticket",
                "description": "Open a support ticket.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "priority": {"type": "string", "enum": ["low", "high"]},
                    },
                    "required": ["title"],
                },
                "url": "https://helpdesk.example.com/api/tickets",
                "method": "POST",
                "headers": {"Authorization": "Bearer {secret:helpdesk_token}"},
            },
            "context_parameters": [
                {"name": "customer_id", "type": "string", "description": "Set by the app"}
            ],
        },
    },
}

TOOL_UPDATE: Examples = {
    "function": {
        "summary": "Replace the seeded dice roller (try it with tool_id `rolldice`)",
        "value": {
            "type": "function",
            "function": {
                "name": "roll_dice",
                "description": "Roll a die with any number of sides.",
                "parameters": _DICE_PARAMETERS,
            },
            "tags": ["games"],
            "enabled": True,
        },
    },
}

CHAT: Examples = {
    "dice": {
        "summary": "A chat that calls the dice tool (the fake model always does)",
        "value": {
            "messages": [{"role": "user", "content": "Roll a six-sided die for me."}],
            "tool_ids": ["rolldice"],
            "max_iterations": 5,
        },
    },
    "streamed": {
        "summary": "The same chat as a stream of server-sent events",
        "value": {
            "messages": [{"role": "user", "content": "Roll a die."}],
            "tool_ids": ["rolldice"],
            "stream": True,
        },
    },
    "context": {
        "summary": "Context arguments: values the tools get and the model never sees",
        "value": {
            "messages": [
                {"role": "system", "content": "You are a game master."},
                {"role": "user", "content": "Roll for initiative."},
            ],
            "context_arguments": {"user_id": "u-42"},
            "tags": ["games"],
        },
    },
}

MCP_SERVER: Examples = {
    "http": {
        "summary": "A streamable-HTTP MCP server with a bearer token",
        "value": {
            "name": "docs",
            "type": "streamable-http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer example-token-0123456789"},
        },
    },
}

MCP_SERVER_UPDATE: Examples = {
    "disable": {
        "summary": "Disable the server `docs` (its headers kept: they are left out)",
        "value": {
            "type": "streamable-http",
            "url": "https://mcp.example.com/mcp",
            "enabled": False,
        },
    },
}

SECRET: Examples = {
    "token": {
        "summary": "An API token (try it with name `helpdesk_token`)",
        "value": {"value": "hd-live-0123456789abcdef"},
    },
}

MODEL_PROVIDER: Examples = {
    "anthropic": {
        "summary": "Claude through Anthropic's Messages API, its key in the secret `anthropic_key`",
        "value": {
            "api": "anthropic_messages",
            "base_url": "https://api.anthropic.com/v1",
            "api_key_secret": "anthropic_key",
            "default_model": "claude-sonnet-4-5",
            "allowed_models": ["claude-haiku-4-5"],
            "default": True,
        },
    },
}

TENANT: Examples = {
    "tenant": {"summary": "A new tenant; its key is shown once", "value": {"tenant_id": "acme"}},
}

KEY_ROTATION: Examples = {
    "revoke": {
        "summary": "New key; the tenant's client tokens are revoked too (the default)",
        "value": {},
    },
    "keep": {
        "summary": "New key; the tenant's client tokens keep working",
        "value": {"keep_client_tokens": True},
    },
}

TOOL_IMPORT: Examples = {
    "inline": {
        "summary": "A one-operation API, tried first (dry_run: nothing is stored)",
        "value": {
            "document": {
                "openapi": "3.1.0",
                "info": {"title": "Orders", "version": "1"},
                "servers": [{"url": "https://shop.example.com/api"}],
                "paths": {
                    "/orders/{order_id}": {
                        "get": {
                            "operationId": "getOrder",
                            "summary": "One order",
                            "parameters": [
                                {
                                    "name": "order_id",
                                    "in": "path",
                                    "required": True,
                                    "schema": {"type": "string"},
                                }
                            ],
                        }
                    }
                },
            },
            "prefix": "shop_",
            "tags": ["shop"],
            "dry_run": True,
        },
    },
}

CLIENT_TOKEN: Examples = {
    "end_user": {
        "summary": "One end user's agent: their user id bound, the seeded dice tool only",
        "value": {
            "name": "alice's desktop agent",
            "context_arguments": {"user_id": "alice"},
            "tool_ids": ["rolldice"],
            "expires_in_s": 86400,
        },
    },
}

OUTBOUND: Examples = {
    "intranet": {
        "summary": "Let this tenant's tools reach one internal host and one network's port 8443",
        "value": {"allow": ["wiki.intranet.example", "10.20.0.0/16:8443"]},
    },
    "none": {"summary": "Back to the operator's policy only", "value": {"allow": []}},
}

INVOKE: Examples = {
    "function": {
        "summary": "The seeded dice roller (try it with tool_id `rolldice`)",
        "value": {"arguments": {"d": 6}},
    },
    "with_context": {
        "summary": "A tool with a context parameter (tool_id `weather-api`, created above)",
        "value": {"arguments": {"city": "Lisbon"}, "context_arguments": {"user_id": "u-42"}},
    },
}

CATEGORY_CREATE: Examples = {
    "charts": {
        "summary": "A category with usage hints for the model",
        "value": {
            "name": "charts",
            "description": "Charts and plots",
            "usage_hints": "Use these when you need to create charts; one chart per answer.",
        },
    },
}

CATEGORY_UPDATE: Examples = {
    "default": {
        "summary": "Hints for the default category (it stays enabled)",
        "value": {
            "description": "Everyday tools",
            "enabled": True,
            "usage_hints": "Prefer these for arithmetic and dates.",
        },
    },
}

CATEGORY_TOGGLE: Examples = {
    "disable": {
        "summary": "Disable one category, enable another, in one request",
        "value": {"enabled": {"charts": False, "default": True}},
    },
}

IDENTITY: Examples = {
    "okta": {
        "summary": "An Okta org's tokens: the user's id and organization bound as context",
        "value": {
            "issuer": "https://acme.okta.com",
            "jwks_uri": "https://acme.okta.com/oauth2/v1/keys",
            "audience": "api://toolgate",
            "claims": {"user_id": "sub", "org": "org_id"},
            "required_claims": ["org_id"],
            "algorithms": ["RS256"],
        },
    },
}

TOKEN_TEST: Examples = {
    "token": {
        "summary": "A token pasted from a client (refused until PUT /identity, saying why)",
        "value": {
            "token": "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJpc3MiOiJodHRwczovL2FjbWUub2t0YS5jb2"
            "0iLCJzdWIiOiJ1LTQyIn0.c2lnbmF0dXJl"
        },
    },
}

OPERATOR_DECISIONS: Examples = {
    "approve": {
        "summary": "Approve the call a client token's chat stopped for (its tool's `approval` is "
        "`operator`; the ids from GET /approvals)",
        "value": {
            "decisions": [{"call_id": "call_7", "approved": True, "reason": "checked by Ada"}]
        },
    },
}
