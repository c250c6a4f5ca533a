# gpusched scheduler image (the scheduler and `gpusched agent`). Build and push:
#   docker build -t gpusched:dev .   (docs/install.md: tagging and pushing to your registry)
# Two stages so the runtime image carries no compiler or pip cache.
FROM python:3.11-slim AS build
WORKDIR /src
# pyproject names README.md (readme) and LICENSE (license-files): the wheel needs both.
COPY pyproject.toml README.md LICENSE ./
COPY gpusched ./gpusched
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin gpusched
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# numba caches compiled kernels next to the package, which is read-only here.
ENV NUMBA_CACHE_DIR=/tmp/numba-cache PYTHONUNBUFFERED=1
USER 65532
ENTRYPOINT ["gpusched"]
CMD ["run"]
