"""Request and response models with limits, so bad input gets a 422, never a 500."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

MIME_TYPES = ("application/pdf", "text/html", "text/markdown", "text/plain")
MimeType = Literal["application/pdf", "text/html", "text/markdown", "text/plain"]
AclEntry = Annotated[str, StringConstraints(pattern=r"^(user|group|service):[^\s]{1,200}$")]
MetaKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
MetaValue = Annotated[str, StringConstraints(max_length=2000)] | int | float | bool | None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AclIn(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: bool = False


class DocumentIn(Strict):
    external_id: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    title: Annotated[str, StringConstraints(max_length=1000)] | None = None
    text: str | None = None
    content_base64: str | None = None
    mime_type: MimeType | None = None
    metadata: dict[MetaKey, MetaValue] = Field(default_factory=dict, max_length=64)
    acl: AclIn = Field(default_factory=AclIn)

    @model_validator(mode="after")
    def _one_body(self) -> DocumentIn:
        if (self.text is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of text or content_base64")
        if self.content_base64 is not None and self.mime_type is None:
            raise ValueError("content_base64 needs a mime_type")
        return self

    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        try:
            return base64.b64decode(self.content_base64 or "", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("content_base64 is not valid base64") from exc

    @property
    def effective_mime(self) -> str:
        return self.mime_type or "text/plain"


class PushRequest(Strict):
    documents: list[dict] = Field(min_length=1)


class Rejection(BaseModel):
    index: int
    external_id: str | None
    code: str
    message: str


class PushResponse(BaseModel):
    job_id: str | None
    accepted: int
    rejections: list[Rejection]


class ItemError(BaseModel):
    item_no: int
    external_id: str
    code: str | None
    message: str | None


class JobOut(BaseModel):
    job_id: str
    kind: str
    state: str
    documents: dict[str, int]
    pages: int
    chunks: int
    bytes: int
    throughput: dict[str, float]
    created_at: str
    started_at: str | None
    finished_at: str | None
    errors: list[ItemError] = Field(default_factory=list)


class AclUpdate(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: bool = False

    @field_validator("principals")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return sorted(set(value))
