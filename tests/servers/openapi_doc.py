"""The OpenAPI 3.0 document of ``http_app.ApiServer`` (served at ``/openapi.json``).

It uses what real documents use: ``$ref`` to parameters, request bodies and schemas, nested and
recursive schemas, ``nullable``, an enum, a header parameter, and an operation without an id.
"""

from __future__ import annotations

from typing import Any

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Test API", "version": "1.0"},
    "paths": {
        "/weather/{city}": {
            "parameters": [{"name": "city", "in": "path", "required": True,
                            "description": "City name.", "schema": {"type": "string"}}],
            "get": {
                "operationId": "getWeather",
                "summary": "Current weather for a city.",
                "description": "Temperatures in the city's own unit unless `units` says otherwise.",
                "parameters": [{"$ref": "#/components/parameters/Units"}],
                "responses": {
                    "200": {"description": "The weather.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Weather"}}}},
                    "404": {"description": "Unknown city."},
                },
            },
        },
        "/items": {
            "get": {
                "operationId": "listItems",
                "summary": "List items.",
                "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}}],
                "responses": {"200": {"description": "Items.", "content": {"application/json": {
                    "schema": {"type": "array", "items": {"$ref": "#/components/schemas/Item"}}}}}},
            },
            "post": {
                "operationId": "createItem",
                "summary": "Create an item.",
                "requestBody": {"$ref": "#/components/requestBodies/NewItem"},
                "responses": {"201": {"description": "Created.", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Item"}}}}},
            },
        },
        "/trace": {
            "get": {
                "summary": "Echo the trace header.",
                "parameters": [{"name": "X-Trace-Id", "in": "header", "required": True, "schema": {"type": "string"}},
                               {"name": "Accept", "in": "header", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "The header."}},
            },
        },
    },
    "components": {
        "parameters": {
            "Units": {"name": "units", "in": "query", "description": "Temperature unit.",
                      "schema": {"type": "string", "enum": ["C", "F"]}},
        },
        "requestBodies": {
            "NewItem": {"required": True, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/NewItem"}}}},
        },
        "schemas": {
            "Weather": {"type": "object", "required": ["city", "temperature", "unit"], "properties": {
                "city": {"type": "string"}, "temperature": {"type": "number"}, "unit": {"type": "string"}}},
            "Tag": {"type": "object", "required": ["label"], "properties": {
                "label": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}}}},
            "NewItem": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "description": "What it is called."},
                "price": {"type": "number", "minimum": 0, "exclusiveMinimum": False},
                "note": {"type": "string", "nullable": True},
                "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}}}},
            "Item": {"allOf": [{"$ref": "#/components/schemas/NewItem"},
                               {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}]},
        },
    },
}
