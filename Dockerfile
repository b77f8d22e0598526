# syntax=docker/dockerfile:1
# Build a wheel in one stage; install it into a slim runtime that runs as a non-root user.
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.7-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin preemption-operator
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT ["preemption-operator"]
CMD ["run"]
