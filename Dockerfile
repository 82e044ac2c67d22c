# neurontools image: the emulated Trn1 instance daemon (later issues add the exporter).
#   docker build -t neurontools .
#   docker run --rm -it neurontools                                  # trn1.2xlarge daemon
#   docker run --rm -it -e INSTANCE_TYPE=trn1.32xlarge neurontools
#   docker exec -it <container> neuron-ls                            # tools inside the container
# The daemon listens on loopback TCP inside the container (it is a device, not a network service).
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    NEURON_EMULATOR_ADDR=http://127.0.0.1:7060 \
    INSTANCE_TYPE=trn1.2xlarge

WORKDIR /opt/neurontools
# CPU-only PyTorch first, from the CPU wheel index, so nothing pulls the CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY neurontools ./neurontools
COPY emulator ./emulator
COPY examples ./examples
RUN pip install '.[emulator]'

CMD ["sh", "-c", "exec neuron-emulator up --instance-type \"$INSTANCE_TYPE\" --port 7060"]
